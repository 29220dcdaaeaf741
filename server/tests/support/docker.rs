//! A real Docker engine (`.ci/run` starts `dockerd`): images of this build's binaries made
//! from the root `Dockerfile` on a Debian base imported from a debootstrap root (no registry
//! is reached), and `docker` commands.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::text;

/// The base image: the one `.ci/run` imports, or `CARILLON_TEST_BASE_IMAGE`. Fails the test,
/// saying what is missing, when no engine answers or the base is absent.
pub fn base_image() -> String {
    let base = std::env::var("CARILLON_TEST_BASE_IMAGE")
        .unwrap_or_else(|_| "carillon-ci/bookworm-minbase".to_owned());
    let engine = docker(&["version", "--format", "{{.Server.Version}}"]);
    assert!(
        engine.status.success(),
        "no Docker engine answers: .ci/run starts dockerd ({})",
        text(&engine.stderr)
    );
    assert!(
        docker(&["image", "inspect", &base]).status.success(),
        "no image {base}: .ci/run imports it from its debootstrap root"
    );
    base
}

/// A binary of this build, beside the test's own `carillon`.
pub fn built_binary(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_carillon")).with_file_name(name);
    assert!(
        path.is_file(),
        "no {} (cargo build -p {name} makes it; cargo test --workspace does too)",
        path.display()
    );
    path
}

/// An image tagged `tag`, removed when dropped.
pub struct Image(pub String);

impl Image {
    /// The root `Dockerfile`'s `target` (a prebuilt one) on `base`, with `files` (path, name)
    /// in its build context.
    pub fn prebuilt(base: &str, target: &str, files: &[(&Path, &str)], tag: &str) -> Self {
        let context = tempfile::tempdir().expect("a build context");
        let dockerfile = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Dockerfile");
        std::fs::copy(dockerfile, context.path().join("Dockerfile")).expect("the Dockerfile");
        for (path, name) in files {
            std::fs::copy(path, context.path().join(name)).expect("a file of the context");
        }
        let runtime = format!("RUNTIME={base}");
        let context = context.path().to_str().expect("a UTF-8 path");
        docker_ok(&[
            "build",
            "-q",
            "--target",
            target,
            "--build-arg",
            &runtime,
            "-t",
            tag,
            context,
        ]);
        Self(tag.to_owned())
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = docker(&["rmi", "-f", &self.0]);
    }
}

pub fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("docker runs")
}

/// `docker args…`, which must succeed.
pub fn docker_ok(args: &[&str]) -> Output {
    let output = docker(args);
    assert!(
        output.status.success(),
        "docker {args:?}: {}{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    output
}
