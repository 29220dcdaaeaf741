//! Build-time inputs the crate embeds:
//! - the migrations: `sqlx::migrate!` embeds the folders' files at compile time, and cargo
//!   does not otherwise watch them;
//! - the web console: every file of `console/` becomes an entry of `CONSOLE_ASSETS`
//!   (`$OUT_DIR/console_assets.rs`), so a file added there is served without a code change;
//! - the commit built (`CARILLON_COMMIT`), for `carillon --version` and the cluster's view of
//!   its nodes: what a bug report or an upgrade needs to name.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
    println!("cargo:rerun-if-changed=console");
    if let Err(err) = write_console_assets() {
        // A build script reports through cargo's protocol; this stops the build, naming why.
        println!("cargo::error=cannot embed the web console: {err}");
    }
    println!("cargo:rustc-env=CARILLON_COMMIT={}", commit());
}

/// The commit of the checkout being built (12 hex digits), or `unknown` outside a git
/// checkout (a source package); watched so that a new commit is seen.
fn commit() -> String {
    let git = Path::new("../.git");
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD")) {
        println!("cargo:rerun-if-changed=../.git/HEAD");
        if let Some(reference) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed=../.git/{reference}");
            println!("cargo:rerun-if-changed=../.git/packed-refs");
        }
    }
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|commit| commit.trim().to_owned())
        .filter(|commit| !commit.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn write_console_assets() -> Result<(), Box<dyn std::error::Error>> {
    let dir = Path::new(&std::env::var("CARGO_MANIFEST_DIR")?).join("console");
    let mut names: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| !name.starts_with('.'))
        .collect();
    names.sort();
    let mut out = String::from(
        "/// `(file name, content type, contents)` of every file of `server/console/`.\n\
         pub(super) const CONSOLE_ASSETS: &[(&str, &str, &str)] = &[\n",
    );
    for name in &names {
        let content_type = match Path::new(name).extension().and_then(|e| e.to_str()) {
            Some("html") => "text/html; charset=utf-8",
            Some("js") => "text/javascript; charset=utf-8",
            Some("css") => "text/css; charset=utf-8",
            Some("svg") => "image/svg+xml",
            _ => "text/plain; charset=utf-8",
        };
        let path = dir.join(name);
        println!("cargo:rerun-if-changed={}", path.display());
        writeln!(
            out,
            "    ({name:?}, {content_type:?}, include_str!({:?})),",
            path.display().to_string()
        )?;
    }
    out.push_str("];\n");
    let target = Path::new(&std::env::var("OUT_DIR")?).join("console_assets.rs");
    std::fs::write(target, out)?;
    Ok(())
}
