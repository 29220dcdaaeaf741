//! The script executor (`carillon executor --scripts DIR`): an executor of the SDK, run on the
//! hosts where the scripts live, whose handlers are the executables of a directory. It
//! registers like any executor, so balancing, sharding, retries and failover are the nodes'
//! as for any other; what runs is only what the host's operator put in the directory, never
//! anything sent through the API.

mod process;
mod run;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use carillon_executor::ExecutorBuilder;

pub(crate) use process::wait_stopped;
pub use run::ScriptRuns;

/// Why the scripts of a directory cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ScriptsError {
    #[error("cannot read the scripts directory {dir}: {source}")]
    ReadDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{first} and {second} would both be the handler {name:?}: rename one")]
    SameName {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error("no executable script in {0}: make a script executable (chmod +x) to serve it")]
    Empty(PathBuf),
    #[error("cannot make the directory for results {dir}: {source}")]
    ResultDir {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// The scripts a directory offers: each handler's name and path, and what was passed over.
#[derive(Debug, Default)]
pub struct ScriptDir {
    /// The directory, as an absolute path.
    pub dir: PathBuf,
    pub handlers: BTreeMap<String, PathBuf>,
    /// Files that are not served, each with the reason.
    pub skipped: Vec<(PathBuf, &'static str)>,
}

impl ScriptDir {
    /// Reads `dir`: every regular, executable, non-hidden file is a handler named by its file
    /// name without extension (`backup.sh` is `backup`), kept by its absolute path (a script
    /// runs in a working directory of its own).
    pub fn scan(dir: &Path) -> Result<Self, ScriptsError> {
        let read_error = |source| ScriptsError::ReadDir {
            dir: dir.to_owned(),
            source,
        };
        let dir = &std::fs::canonicalize(dir).map_err(read_error)?;
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(read_error)?
            .map(|entry| entry.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(read_error)?;
        paths.sort();
        let mut found = Self {
            dir: dir.clone(),
            ..Self::default()
        };
        for path in paths {
            let file_name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if file_name.starts_with('.') {
                continue;
            }
            // Follows a symbolic link, as running it would.
            let Ok(meta) = std::fs::metadata(&path) else {
                found.skipped.push((path, "cannot be read"));
                continue;
            };
            if !meta.is_file() {
                found.skipped.push((path, "not a regular file"));
                continue;
            }
            if meta.permissions().mode() & 0o111 == 0 {
                found.skipped.push((path, "not executable"));
                continue;
            }
            if let Err(why) = inside(dir, &path) {
                found.skipped.push((path, why));
                continue;
            }
            let name = match file_name.split_once('.') {
                Some((stem, _)) => stem.to_owned(),
                None => file_name,
            };
            if !valid_name(&name) {
                found.skipped.push((
                    path,
                    "its name is not 1 to 128 letters, digits, '-' or '_' before the extension",
                ));
                continue;
            }
            if let Some(first) = found.handlers.get(&name) {
                return Err(ScriptsError::SameName {
                    name,
                    first: first.clone(),
                    second: path,
                });
            }
            found.handlers.insert(name, path);
        }
        if found.handlers.is_empty() {
            return Err(ScriptsError::Empty(dir.to_owned()));
        }
        Ok(found)
    }
}

/// The real path of `path`, a file of `dir` (itself a real path): refused when a symbolic
/// link, of the file or of a directory on its way, leads out of `dir`. Only what the host's
/// operator put in the directory runs, not what a link there points to elsewhere.
fn inside(dir: &Path, path: &Path) -> Result<PathBuf, &'static str> {
    let real = std::fs::canonicalize(path).map_err(|_| "cannot be read")?;
    if real.starts_with(dir) {
        Ok(real)
    } else {
        Err("a symbolic link to a file outside the directory")
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

/// How the scripts run, beside what each dispatch brings.
#[derive(Debug, Clone)]
pub struct ScriptSettings {
    /// The scripts' working directory.
    pub workdir: PathBuf,
    /// Variables of the executor's own environment a script is given (the rest is not).
    pub pass_env: Vec<String>,
    /// After SIGTERM on timeout or cancel, how long until SIGKILL.
    pub kill_grace: Duration,
    /// Where result files are made, one per attempt.
    pub result_dir: PathBuf,
    /// Most scripts running at once, those winding down after a cancel or timeout included.
    pub concurrency: usize,
}

impl ScriptSettings {
    /// Makes the result directory, readable by this user only.
    pub fn prepare(&self) -> Result<(), ScriptsError> {
        let made = std::fs::create_dir_all(&self.result_dir).and_then(|()| {
            std::fs::set_permissions(&self.result_dir, std::fs::Permissions::from_mode(0o700))
        });
        made.map_err(|source| ScriptsError::ResultDir {
            dir: self.result_dir.clone(),
            source,
        })
    }
}

/// `builder` with a handler per script of `scripts`.
pub fn with_handlers(
    mut builder: ExecutorBuilder,
    scripts: &ScriptDir,
    settings: ScriptSettings,
) -> ExecutorBuilder {
    let runs = Arc::new(ScriptRuns::new(settings));
    let dir = Arc::new(scripts.dir.clone());
    for (name, path) in &scripts.handlers {
        let runs = Arc::clone(&runs);
        let dir = Arc::clone(&dir);
        let path = Arc::new(path.clone());
        let description = format!("the script {}", path.display());
        builder = builder.handler(name.clone(), description, move |ctx| {
            let runs = Arc::clone(&runs);
            let dir = Arc::clone(&dir);
            let path = Arc::clone(&path);
            async move {
                // Checked again at each run: a link may have been changed since the scan.
                let real = inside(&dir, &path)
                    .map_err(|why| format!("{} was not run: {why}", path.display()))?;
                runs.run(&real, ctx).await
            }
        });
    }
    builder
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(dir: &Path, name: &str, mode: u32) {
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn executables_are_handlers_named_by_their_stem() {
        let dir = tempfile::tempdir().unwrap();
        script(dir.path(), "backup.sh", 0o755);
        script(dir.path(), "report", 0o700);
        script(dir.path(), "notes.txt", 0o644);
        script(dir.path(), ".hidden.sh", 0o755);
        script(dir.path(), "two words.sh", 0o755);
        std::fs::create_dir(dir.path().join("lib")).unwrap();
        let found = ScriptDir::scan(dir.path()).unwrap();
        let names: Vec<&str> = found.handlers.keys().map(String::as_str).collect();
        assert_eq!(names, ["backup", "report"]);
        let skipped: Vec<(String, &str)> = found
            .skipped
            .iter()
            .map(|(p, why)| (p.file_name().unwrap().to_string_lossy().into_owned(), *why))
            .collect();
        assert_eq!(
            skipped,
            [
                ("lib".to_owned(), "not a regular file"),
                ("notes.txt".to_owned(), "not executable"),
                (
                    "two words.sh".to_owned(),
                    "its name is not 1 to 128 letters, digits, '-' or '_' before the extension"
                ),
            ]
        );
    }

    #[test]
    fn a_symbolic_link_leading_out_of_the_directory_is_no_handler() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("scripts");
        let outside = root.path().join("outside");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(outside.join("bin")).unwrap();
        script(&outside, "evil.sh", 0o755);
        script(&dir, "v2.sh", 0o755);
        std::os::unix::fs::symlink("../outside/evil.sh", dir.join("linked.sh")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("sub")).unwrap();
        std::os::unix::fs::symlink("v2.sh", dir.join("latest.sh")).unwrap();
        let found = ScriptDir::scan(&dir).unwrap();
        let names: Vec<&str> = found.handlers.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["latest", "v2"],
            "a link inside the directory is served"
        );
        let skipped: Vec<(String, &str)> = found
            .skipped
            .iter()
            .map(|(p, why)| (p.file_name().unwrap().to_string_lossy().into_owned(), *why))
            .collect();
        assert_eq!(
            skipped,
            [
                (
                    "linked.sh".to_owned(),
                    "a symbolic link to a file outside the directory"
                ),
                ("sub".to_owned(), "not a regular file"),
            ]
        );
        // A link changed after the scan is refused when it would run.
        let latest = found.handlers["latest"].clone();
        std::fs::remove_file(&latest).unwrap();
        std::os::unix::fs::symlink(outside.join("evil.sh"), &latest).unwrap();
        assert_eq!(
            inside(&found.dir, &latest),
            Err("a symbolic link to a file outside the directory")
        );
    }

    #[test]
    fn two_scripts_of_one_name_or_none_at_all_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let empty = ScriptDir::scan(dir.path()).unwrap_err();
        assert!(empty.to_string().contains("chmod +x"), "{empty}");
        script(dir.path(), "sync.sh", 0o755);
        script(dir.path(), "sync.py", 0o755);
        let twice = ScriptDir::scan(dir.path()).unwrap_err();
        assert!(
            twice
                .to_string()
                .contains("would both be the handler \"sync\""),
            "{twice}"
        );
        let missing = ScriptDir::scan(&dir.path().join("nowhere")).unwrap_err();
        assert!(missing.to_string().contains("nowhere"), "{missing}");
    }
}
