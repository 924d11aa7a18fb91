//! `rdctl`: the RedDwarf image toolchain command line.
//!
//! This crate only parses arguments, calls one library entry point per command, and prints.
//! Exit codes: 0 success, 1 the checked content is invalid, 2 the command could not run.

use std::io::Write as _;
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

mod commands;
mod logging;
mod runtime;

/// Build, validate, serve and pull OCI images for illumos zones.
#[derive(Debug, Parser)]
#[command(
    name = "rdctl",
    version,
    about,
    long_about = None,
    after_help = "Examples:
  rdctl lock image.toml && rdctl build image.toml --output ./image
  rdctl registry serve --listen 127.0.0.1:5000 --data ./registry-data
  rdctl push ./image:1.0 127.0.0.1:5000/zones/hello:1.0
  rdctl sync central.example:5000/zones bundle:/media/usb/zones
  rdctl login -u alice registry.example:5000 && rdctl pull registry.example:5000/zones/hello:1.0 ./image
  rdctl worker run --once --config worker.toml
  rdctl validate --json ./image:1.0
  rdctl inspect 127.0.0.1:5000/zones/hello:1.0 && rdctl ls 127.0.0.1:5000/zones/hello
  rdctl key generate && rdctl sign --key cosign.key 127.0.0.1:5000/zones/hello:1.0
  rdctl verify --key cosign.pub --attestation spdxjson 127.0.0.1:5000/zones/hello:1.0

Exit status (every command): 0 success; 1 the checked content is invalid or part of the work
failed (validate, verify, sync, ips list/info/contents/lint, worker run --once); 2 the command could not run
(bad arguments, unreadable input, unreachable server), with `rdctl: what: why` on stderr.
--json (validate, build, lock, push, pull, copy, sync, inspect, ls, tag, rm, sbom, search,
key generate, sign, verify, attest, registry gc, registry reindex, registry retention, registry usage,
registry scrub, worker run, worker status)
prints
one JSON document on stdout instead of text (on failure {\"error\": {\"kind\", \"message\",
\"exit_status\"}}); logs and messages stay on stderr."
)]
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
    /// Validate an OCI image layout ([oci:]DIR[:TAG|@DIGEST]) or a single JSON document.
    Validate(commands::validate::Args),
    /// Push an OCI image layout (DIR[:TAG]) to a registry.
    Push(commands::transfer::PushArgs),
    /// Pull an image from a registry into an OCI image layout.
    Pull(commands::transfer::PullArgs),
    /// Copy an image between layouts (oci:DIR[:TAG]) and registries.
    Copy(commands::transfer::CopyArgs),
    /// Copy many images between registries and air-gap bundles (bundle:DIR).
    Sync(commands::sync::SyncArgs),
    /// Show what is inside an image: config, layers and their packages, referrers.
    Inspect(commands::inspect::InspectArgs),
    /// List a registry's repositories, or a repository's or layout's tags.
    Ls(commands::manage::LsArgs),
    /// Name an image by one more tag in the same repository or layout.
    Tag(commands::manage::TagArgs),
    /// Delete a tag or manifest and show what garbage collection can reclaim.
    Rm(commands::manage::RmArgs),
    /// List the IPS packages of an image from its SPDX SBOM.
    Sbom(commands::inspect::SbomArgs),
    /// Print a manifest or index byte for byte (`manifest get`).
    #[command(
        subcommand,
        after_help = "Example:
  rdctl manifest get 127.0.0.1:5000/zones/base:1.0 | jq ."
    )]
    Manifest(commands::raw::ManifestCommand),
    /// Write a blob, verified while it streams (`blob get`).
    #[command(
        subcommand,
        after_help = "Example:
  rdctl blob get 127.0.0.1:5000/zones/base@sha256:<hex> -o layer.tar.gz"
    )]
    Blob(commands::raw::BlobCommand),
    /// Print an image's config blob byte for byte.
    Config(commands::raw::ConfigArgs),
    /// Print the digest of the manifest or index a reference names.
    Digest(commands::raw::DigestArgs),
    /// Push or get oras-style artifacts (files with an artifactType, maybe a subject).
    #[command(
        subcommand,
        after_help = "Example:
  rdctl artifact put --artifact-type application/vnd.example.notes 127.0.0.1:5000/docs/notes:1 notes.txt"
    )]
    Artifact(commands::artifact::Command),
    /// Find the images at a registry that hold a package (by name and pkg(5) version).
    Search(commands::search::SearchArgs),
    /// Generate a key pair for signing images (cosign-compatible).
    #[command(
        subcommand,
        after_help = "Example:
  rdctl key generate --output-key-prefix release"
    )]
    Key(commands::trust::KeyCommand),
    /// Sign an image (cosign-compatible; at its sha256-<hex>.sig tag).
    Sign(commands::trust::SignArgs),
    /// Verify an image's signatures and attestations with public keys.
    Verify(commands::trust::VerifyArgs),
    /// Attach a signed in-toto attestation (SBOM, provenance) to an image.
    Attest(commands::trust::AttestArgs),
    /// Check a registry credential and save it for every later command (docker config.json).
    Login(commands::login::LoginArgs),
    /// Remove a registry credential saved by login.
    Logout(commands::login::LogoutArgs),
    /// Publish, serve, inspect and lint pkg(5) (IPS) repositories and manifests.
    #[command(
        subcommand,
        after_help = "Examples:
  rdctl ips publish --repo ./repo --publisher example.org --proto ./proto hello.p5m
  rdctl ips serve --repo ./repo --listen 127.0.0.1:10000
  rdctl ips list http://127.0.0.1:10000/"
    )]
    Ips(commands::ips::Command),
    /// Run the OCI registry, collect its garbage, rebuild its package index.
    #[command(
        subcommand,
        after_help = "Example:
  rdctl registry serve --config /etc/rdctl/registry.toml"
    )]
    Registry(commands::registry::Command),
    /// Pull, verify and provision zones on this node.
    #[command(
        subcommand,
        after_help = "Examples:
  rdctl worker run --config /etc/rdctl/worker.toml
  rdctl worker status --json"
    )]
    Worker(commands::worker::Command),
    /// Print a shell completion script for rdctl.
    Completions(commands::meta::CompletionsArgs),
    /// Write man pages for rdctl and every subcommand into a directory.
    Man(commands::meta::ManArgs),
}

impl Command {
    /// Whether the command was asked for one JSON document on stdout: then a failure is a
    /// JSON error document there too.
    fn json(&self) -> bool {
        match self {
            Command::Build(a) => a.json,
            Command::Lock(a) => a.json,
            Command::Validate(a) => a.json,
            Command::Push(a) => a.common.json,
            Command::Pull(a) => a.common.json,
            Command::Copy(a) => a.common.json,
            Command::Sync(a) => a.json,
            Command::Inspect(a) => a.json,
            Command::Ls(a) => a.json,
            Command::Tag(a) => a.json,
            Command::Rm(a) => a.json,
            Command::Sbom(a) => a.json,
            Command::Search(a) => a.json,
            Command::Key(commands::trust::KeyCommand::Generate(a)) => a.json,
            Command::Sign(a) => a.json,
            Command::Verify(a) => a.json,
            Command::Attest(a) => a.json,
            Command::Registry(commands::registry::Command::Gc(a)) => a.json,
            Command::Registry(commands::registry::Command::Reindex(a)) => a.json,
            Command::Registry(commands::registry::Command::Scrub(a)) => a.json,
            Command::Registry(commands::registry::Command::Retention(a)) => a.json,
            Command::Registry(commands::registry::Command::Usage(a)) => a.json,
            Command::Worker(commands::worker::Command::Run(a)) => a.json,
            Command::Worker(commands::worker::Command::Status(a)) => a.json,
            _ => false,
        }
    }
}

/// The class of a failure for `--json` users to branch on, from the library error that
/// caused it.
fn error_kind(e: &anyhow::Error) -> &'static str {
    for cause in e.chain() {
        if let Some(t) = cause.downcast_ref::<registry_client::transfer::TransferError>() {
            use registry_client::transfer::ErrorKind as K;
            return match t.kind() {
                K::NotFound => "not_found",
                K::Unauthorized => "unauthorized",
                K::Transient => "transient",
                K::Invalid => "invalid",
                _ => "error",
            };
        }
        if let Some(c) = cause.downcast_ref::<registry_client::ClientError>() {
            use registry_client::ErrorKind as K;
            return match c.kind() {
                K::NotFound => "not_found",
                K::Unauthorized => "unauthorized",
                K::Transient => "transient",
                K::Verify | K::Invalid => "invalid",
                _ => "error",
            };
        }
        if cause.downcast_ref::<std::io::Error>().is_some() {
            return "io";
        }
    }
    "error"
}

/// `rdctl ls … | head`: the reader went away, which is success (ripgrep's rule), wherever the
/// write was wrapped. serde_json's error does not give its io::Error as a source, so it is
/// asked for the kind.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.command.json();
    let result = match cli.command {
        Command::Build(args) => commands::build::run(args),
        Command::Lock(args) => commands::lock::run(args),
        Command::Validate(args) => commands::validate::run(args),
        Command::Push(args) => commands::transfer::push(args),
        Command::Pull(args) => commands::transfer::pull(args),
        Command::Copy(args) => commands::transfer::copy(args),
        Command::Sync(args) => commands::sync::run(args),
        Command::Inspect(args) => commands::inspect::inspect(args),
        Command::Ls(args) => commands::manage::ls(args),
        Command::Tag(args) => commands::manage::tag(args),
        Command::Rm(args) => commands::manage::rm(args),
        Command::Sbom(args) => commands::inspect::sbom(args),
        Command::Manifest(cmd) => commands::raw::manifest(cmd),
        Command::Blob(cmd) => commands::raw::blob(cmd),
        Command::Config(args) => commands::raw::config(args),
        Command::Digest(args) => commands::raw::digest(args),
        Command::Artifact(cmd) => commands::artifact::run(cmd),
        Command::Search(args) => commands::search::run(args),
        Command::Key(cmd) => commands::trust::key(cmd),
        Command::Sign(args) => commands::trust::sign(args),
        Command::Verify(args) => commands::trust::verify(args),
        Command::Attest(args) => commands::trust::attest(args),
        Command::Login(args) => commands::login::login(args),
        Command::Logout(args) => commands::login::logout(args),
        Command::Ips(cmd) => commands::ips::run(cmd),
        Command::Registry(cmd) => commands::registry::run(cmd),
        Command::Worker(cmd) => commands::worker::run(cmd),
        Command::Completions(args) => commands::meta::completions(args, Cli::command()),
        Command::Man(args) => commands::meta::man(args, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("rdctl: {e:#}");
            if json {
                let doc = serde_json::json!({
                    "error": {
                        "kind": error_kind(&e),
                        "message": format!("{e:#}"),
                        "exit_status": 2,
                    }
                });
                // A closed stdout must not turn the failure into a panic.
                let _ = writeln!(std::io::stdout(), "{doc}");
            }
            ExitCode::from(2)
        }
    }
}
