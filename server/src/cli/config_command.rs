//! `carillon config`: every setting a node takes, and a check of a settings file as a node
//! would read it (for a package's unit, a configuration management run, a review).

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;

use super::commands::out;
use crate::config::Config;
use crate::config::example::EXAMPLE;

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
