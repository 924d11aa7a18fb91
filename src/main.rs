//! `rdctl`: the RedDwarf image toolchain command line.
//!
//! This crate only parses arguments, calls one library entry point per command, and prints.
//! Exit codes: 0 success, 1 the checked content is invalid, 2 the command could not run.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;

/// Build, validate, serve and pull OCI images for illumos zones.
#[derive(Debug, Parser)]
#[command(name = "rdctl", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build an OCI image from an image file and its lockfile.
    Build(commands::build::Args),
    /// Resolve an image file's packages into a lockfile beside it.
    Lock(commands::lock::Args),
    /// Validate an OCI image layout (PATH or PATH:TAG) or a single JSON document.
    Validate(commands::validate::Args),
    /// Push an OCI image layout (DIR[:TAG]) to a registry.
    Push(commands::transfer::PushArgs),
    /// Pull an image from a registry into an OCI image layout.
    Pull(commands::transfer::PullArgs),
    /// Copy an image between layouts (oci:DIR[:TAG]) and registries.
    Copy(commands::transfer::CopyArgs),
    /// Publish, serve, inspect and lint pkg(5) (IPS) repositories and manifests.
    #[command(subcommand)]
    Ips(commands::ips::Command),
    /// Run the OCI registry.
    #[command(subcommand)]
    Registry(commands::registry::Command),
    /// Pull, verify and provision zones on this node.
    #[command(subcommand)]
    Worker(commands::worker::Command),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Build(args) => commands::build::run(args),
        Command::Lock(args) => commands::lock::run(args),
        Command::Validate(args) => commands::validate::run(args),
        Command::Push(args) => commands::transfer::push(args),
        Command::Pull(args) => commands::transfer::pull(args),
        Command::Copy(args) => commands::transfer::copy(args),
        Command::Ips(cmd) => commands::ips::run(cmd),
        Command::Registry(cmd) => commands::registry::run(cmd),
        Command::Worker(cmd) => commands::worker::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("rdctl: {e:#}");
            ExitCode::from(2)
        }
    }
}
