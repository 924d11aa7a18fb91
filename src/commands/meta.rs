//! `rdctl completions` and `rdctl man`: shell completions and man pages generated from the
//! command line definition itself, so they never disagree with `--help`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

/// Arguments of `rdctl completions`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl completions bash > /etc/bash_completion.d/rdctl
  rdctl completions zsh > \"${fpath[1]}/_rdctl\"
  rdctl completions fish > ~/.config/fish/completions/rdctl.fish

Exit status: 0 printed, 2 stdout could not be written.")]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Arguments of `rdctl man`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl man /usr/local/share/man/man1
  rdctl man ./man && man -l ./man/rdctl-build.1

Writes rdctl.1 and rdctl-<subcommand>[-<subcommand>].1 for every subcommand, and prints their
paths. Exit status: 0 written, 2 the directory could not be written.")]
pub struct ManArgs {
    /// Directory to write the pages into (created when missing).
    dir: PathBuf,
}

/// Runs `rdctl completions`.
pub fn completions(args: CompletionsArgs, mut cmd: clap::Command) -> anyhow::Result<ExitCode> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "rdctl", &mut out);
    std::io::stdout().lock().write_all(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `rdctl man`.
pub fn man(args: ManArgs, cmd: clap::Command) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    // Building names every subcommand `rdctl-sub-sub` (its display name), which becomes the
    // page's file name and title.
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut pending = vec![cmd];
    let mut out = std::io::stdout().lock();
    while let Some(cmd) = pending.pop() {
        pending.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        let path = clap_mangen::Man::new(cmd)
            .generate_to(&args.dir)
            .with_context(|| format!("cannot write a man page into {}", args.dir.display()))?;
        writeln!(out, "{}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}
