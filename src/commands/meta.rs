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
        let path = args.dir.join(format!(
            "{}.1",
            cmd.get_display_name().unwrap_or_else(|| cmd.get_name())
        ));
        let mut page = Vec::new();
        render_page(&cmd, &mut page)?;
        std::fs::write(&path, page)
            .with_context(|| format!("cannot write the man page {}", path.display()))?;
        writeln!(out, "{}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One man page: clap_mangen's title (carrying the version), name, synopsis, description,
/// options and subcommands, then the `--help` text after the options (examples, exit status)
/// as an EXAMPLES section in no-fill mode, so each example is one line that pastes as
/// printed (clap_mangen's own EXTRA section lets roff reflow and hyphenate it:
/// `local‐ host:5000`), and a VERSION section on every page.
fn render_page(cmd: &clap::Command, w: &mut Vec<u8>) -> std::io::Result<()> {
    let version = env!("CARGO_PKG_VERSION");
    let man = clap_mangen::Man::new(cmd.clone()).source(format!("rdctl {version}"));
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(w)?;
    }
    if let Some(after) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        w.extend_from_slice(b".SH EXAMPLES\n.nf\n");
        for line in after.to_string().lines() {
            w.extend_from_slice(roff_line(line).as_bytes());
            w.push(b'\n');
        }
        w.extend_from_slice(b".fi\n");
    }
    w.extend_from_slice(format!(".SH VERSION\nrdctl {version}\n").as_bytes());
    Ok(())
}

/// A text line for roff's no-fill mode: backslashes and hyphens escaped (so `-` stays an
/// ASCII hyphen-minus when pasted), and a leading `.` or `'` kept from reading as a request.
fn roff_line(line: &str) -> String {
    let mut s = String::with_capacity(line.len() + 8);
    if line.starts_with(['.', '\'']) {
        s.push_str("\\&");
    }
    for c in line.chars() {
        match c {
            '\\' => s.push_str("\\e"),
            '-' => s.push_str("\\-"),
            c => s.push(c),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roff_lines_keep_hyphens_and_dots_literal() {
        assert_eq!(
            roff_line("rdctl push --json a:1 b"),
            "rdctl push \\-\\-json a:1 b"
        );
        assert_eq!(roff_line(".hidden"), "\\&.hidden");
        assert_eq!(roff_line("a\\b"), "a\\eb");
    }
}
