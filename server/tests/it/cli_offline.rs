//! The `carillon` commands that need no node: the settings file's example and check, the
//! version, shell completions and manual pages.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::process::Command;

/// file as a node would and names what is wrong in it.
#[test]
fn the_config_example_is_taken_and_check_names_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_carillon"));
        for (key, _) in std::env::vars() {
            if key.starts_with("CARILLON_") {
                command.env_remove(key);
            }
        }
        let output = command.args(args).output().unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (ok, example, said) = run(&["config", "example"]);
    assert!(ok, "{said}");
    assert!(
        example.contains("# listen = \"127.0.0.1:9001\""),
        "{example}"
    );
    let check = |name: &str, text: &str| {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        run(&["--config", file.to_str().unwrap(), "config", "check"])
    };
    let (ok, said, err) = check("example.toml", &example);
    assert!(ok && said.ends_with("example.toml: ok\n"), "{said}{err}");
    // Live settings of one's own pass too.
    let (ok, said, err) = check(
        "mine.toml",
        "[http]\nlisten = \"0.0.0.0:9001\"\n[auth]\nadmin_token = \"0123456789abcdef0123\"\n",
    );
    assert!(ok, "{said}{err}");
    let (ok, _, err) = check("typo.toml", "[http]\nlisen = \"0.0.0.0:9001\"\n");
    assert!(!ok && err.contains("lisen"), "{err}");
    let (ok, _, err) = check(
        "placeholder.toml",
        "[auth]\nadmin_token = \"replace-me-0000000000000000\"\n",
    );
    assert!(
        !ok && err.contains("auth.admin_token") && err.contains("placeholder"),
        "{err}"
    );
    let (ok, _, err) = run(&["config", "check"]);
    assert!(!ok && err.contains("--config FILE"), "{err}");
}

/// `carillon --version` names the commit built, as each node tells the cluster
/// (`GET /api/v1/cluster`): what a bug report or an upgrade names.
#[test]
fn the_version_names_the_commit_built() {
    let output = Command::new(env!("CARGO_BIN_EXE_carillon"))
        .arg("--version")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        said.trim(),
        format!("carillon {}", carillon_server::VERSION)
    );
    let commit = carillon_server::VERSION
        .split_once(" (")
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap();
    assert!(
        commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "built in a git checkout, the commit is named: {said}"
    );
}

/// The shell completions load into bash and complete the subcommands; the manual pages name
/// every subcommand, and the server's page its settings' environment variables.
#[test]
fn completions_load_and_the_manual_pages_name_what_there_is() {
    let carillon = env!("CARGO_BIN_EXE_carillon");
    let script = format!(
        "source <('{carillon}' completions bash) && complete -p carillon && \
         COMP_WORDS=(carillon con) && COMP_CWORD=1 && _carillon carillon con carillon && \
         echo \"${{COMPREPLY[@]}}\""
    );
    let completed = Command::new("bash").args(["-c", &script]).output().unwrap();
    let said = String::from_utf8_lossy(&completed.stdout);
    assert!(
        completed.status.success() && said.contains("_carillon") && said.contains("config"),
        "{said}{}",
        String::from_utf8_lossy(&completed.stderr)
    );
    let page = Command::new(carillon).arg("man").output().unwrap();
    let page = String::from_utf8_lossy(&page.stdout);
    assert!(
        page.starts_with(".ie") && page.contains(".TH carillon 1"),
        "{page}"
    );
    for subcommand in ["server", "migrate", "config", "jobs", "tasks", "workflows"] {
        assert!(page.contains(subcommand), "{subcommand} in {page}");
    }
    let dir = tempfile::tempdir().unwrap();
    let wrote = Command::new(carillon)
        .args(["man", "--dir", dir.path().to_str().unwrap()])
        .status()
        .unwrap();
    assert!(wrote.success());
    let server = std::fs::read_to_string(dir.path().join("carillon-server.1")).unwrap();
    assert!(server.contains("CARILLON_DATABASE_URL"), "{server}");
}
