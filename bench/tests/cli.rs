//! What `carillon-bench` says when it cannot start: a missing `carillon` binary and a bad
//! flag are named before any database or node is touched. (Building this test also puts the
//! bench binary beside the node's, where CI's short soak runs it.)
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::process::Command;

fn bench(args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_carillon-bench"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_missing_carillon_binary_is_named_with_how_to_build_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("carillon");
    let (ok, stderr) = bench(&[
        "--db",
        "sqlite",
        "--carillon",
        missing.to_str().unwrap(),
        "soak",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains(&format!("no carillon binary at {}", missing.display()))
            && stderr.contains("cargo build --release -p carillon-server"),
        "{stderr}"
    );
}

#[test]
fn a_node_setting_that_is_not_key_value_is_named() {
    let (ok, stderr) = bench(&["--node-env", "CARILLON_LOG", "throughput"]);
    assert!(!ok);
    assert!(
        stderr.contains("`CARILLON_LOG` is not KEY=VALUE"),
        "{stderr}"
    );
}
