//! Build-time inputs the crate embeds:
//! - the migrations: `sqlx::migrate!` embeds the folders' files at compile time, and cargo
//!   does not otherwise watch them;
//! - the web console: every file of `console/` becomes an entry of `CONSOLE_ASSETS`
//!   (`$OUT_DIR/console_assets.rs`), so a file added there is served without a code change.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
    println!("cargo:rerun-if-changed=console");
    if let Err(err) = write_console_assets() {
        // A build script reports through cargo's protocol; this stops the build, naming why.
        println!("cargo::error=cannot embed the web console: {err}");
    }
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
