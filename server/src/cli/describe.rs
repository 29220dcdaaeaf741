//! What describes the command and its node rather than driving one: `carillon config` (every
//! setting a node takes, and a check of a settings file as a node reads it, for a package's
//! unit, a configuration management run, a review), the shell completions and the manual
//! page, which packages install.

use std::path::Path;
use std::process::ExitCode;

use clap::{CommandFactory, Subcommand};

use super::commands::out;
use crate::config::Config;
use crate::config::example::EXAMPLE;

use super::Cli;

#[derive(Debug, Subcommand)]
pub(super) enum ConfigCommand {
    /// Print every setting, commented, with its default: a carillon.toml to start from.
    Example,
    /// Check the file given with --config: its keys, values and tokens, as a node reads them
    /// (the environment and flags a node is started with may still change them).
    Check,
}

/// Runs `command`; `file` is the `--config` file, already read into `config`.
pub(super) fn run(command: &ConfigCommand, file: Option<&Path>, config: &Config) -> ExitCode {
    match command {
        ConfigCommand::Example => {
            out(EXAMPLE.trim_end());
            ExitCode::SUCCESS
        }
        ConfigCommand::Check => {
            let Some(file) = file else {
                eprintln!("carillon: name the file to check: carillon --config FILE config check");
                return ExitCode::FAILURE;
            };
            match config.validate() {
                Ok(()) => {
                    out(&format!("{}: ok", file.display()));
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    eprintln!("carillon: {}: {err}", file.display());
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `carillon completions SHELL`.
pub(super) fn completions(shell: clap_complete::Shell) -> ExitCode {
    let mut text = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "carillon", &mut text);
    out(String::from_utf8_lossy(&text).trim_end());
    ExitCode::SUCCESS
}

/// `carillon man`: the page of `carillon`, naming its subcommands; with `dir`, that page and
/// one per subcommand written there, as a package installs them.
pub(super) fn man(dir: Option<&Path>) -> ExitCode {
    if let Some(dir) = dir {
        return match clap_mangen::generate_to(Cli::command(), dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!(
                    "carillon: cannot write the manual pages into {}: {err}",
                    dir.display()
                );
                ExitCode::FAILURE
            }
        };
    }
    let mut page = Vec::new();
    if let Err(err) = clap_mangen::Man::new(Cli::command()).render(&mut page) {
        eprintln!("carillon: cannot write the manual page: {err}");
        return ExitCode::FAILURE;
    }
    out(String::from_utf8_lossy(&page).trim_end());
    ExitCode::SUCCESS
}
