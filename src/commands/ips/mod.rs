//! `rdctl ips ...`: publish, serve, inspect and lint pkg(5) (IPS) repositories and manifests.
//! Listing and reading packages of a repository or depot (`list`, `info`, `contents`) is in
//! [`query`].

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use ips_bridge::{DepotServer, FileRepo, LintFinding, Manifest, ServerTls};

mod query;

use query::{contents, info, list, patterns, with_repo};

/// IPS subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Publish a package from a manifest (and a proto directory) into a v4 file repository.
    #[command(after_help = "Example:
  rdctl ips publish --repo ./repo --publisher example.org --proto ./proto hello.p5m

Creates the repository when DIR has no pkg5.repository. Prints the published FMRI.
The manifest is linted first (see `rdctl ips lint`): any error refuses it, printed on stderr
as lint prints it, and nothing is written.
Exit status: 0 published, 2 the package could not be published.")]
    Publish(PublishArgs),
    /// Serve a file repository read-only over the depot protocol until SIGTERM or ctrl-c.
    #[command(after_help = "Examples:
  rdctl ips serve --repo ./repo                        # http://127.0.0.1:10000/
  rdctl ips serve --repo ./repo --listen 127.0.0.1:0   # a free port, printed
  rdctl ips serve --repo ./repo --listen 0.0.0.0:8443 --tls-cert depot.crt --tls-key depot.key

Prints `listening on URL` (the real port when PORT is 0) on stdout: http://, or https:// with
--tls-cert and --tls-key. pkg(5) clients list, install, pkgrecv and `pkg search -r` from it
(search/0 and search/1 with pkg's query language, read from the manifests: see docs/ips.md).
The server holds no state, so SIGTERM or ctrl-c simply ends the process.
Exit status: 2 the repository could not be opened or the address bound; otherwise it serves
until a signal ends it.")]
    Serve(ServeArgs),
    /// List every catalogued version matching the patterns (all packages when none given).
    #[command(after_help = "Examples:
  rdctl ips list ./repo
  rdctl ips list http://127.0.0.1:10000/ demo/hello@1.0
  rdctl ips list https://depot.example/ --ca-file ./depot-ca.pem

Exit status: 0 something listed, 1 nothing matches a pattern, 2 the repository is unreadable.")]
    List(QueryArgs),
    /// Show the newest package matching each pattern, verifying all its payloads.
    #[command(after_help = "Example:
  rdctl ips info ./repo demo/hello

Exit status: 0 all found and verified, 1 a package is missing or a manifest or payload is
corrupt (each problem names the package and the file), 2 the repository is unreadable.")]
    Info(QueryArgs),
    /// List the actions of the newest package matching each pattern, verifying payloads.
    #[command(after_help = "Examples:
  rdctl ips contents ./repo demo/hello
  rdctl ips contents --manifest http://127.0.0.1:10000/ demo/hello@1.0 > hello.p5m

Exit status as for `rdctl ips info`.")]
    Contents(ContentsArgs),
    /// Check a manifest: every parse error, every action pkg would refuse to publish, and
    /// pkglint's duplicate and conflicting actions.
    #[command(after_help = "Example:
  rdctl ips lint hello.p5m

Prints FILE:LINE:COLUMN: MESSAGE [RULE-ID] for each problem (FILE: MESSAGE [RULE-ID] for one of
the whole manifest, such as a missing pkg.fmri); warnings say `warning:`. The rules are listed
in docs/ips.md.
Exit status: 0 no errors (warnings allowed), 1 errors found, 2 the file could not be read.")]
    Lint(LintArgs),
}

/// Arguments of `rdctl ips publish`.
#[derive(Debug, clap::Args)]
pub struct PublishArgs {
    /// The repository directory (created when missing).
    #[arg(long, value_name = "DIR")]
    repo: PathBuf,
    /// The publisher to publish under.
    #[arg(long, value_name = "NAME")]
    publisher: String,
    /// Directory holding the payloads, at each file action's path (or its positional hash).
    #[arg(long, value_name = "DIR")]
    proto: Option<PathBuf>,
    /// The manifest to publish.
    manifest: PathBuf,
}

/// Arguments of `rdctl ips serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The repository directory.
    #[arg(long, value_name = "DIR")]
    repo: PathBuf,
    /// Address to listen on (port 0 picks a free port); loopback only unless told otherwise.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:10000")]
    listen: String,
    /// Serve HTTPS with this PEM certificate chain (server certificate first); needs
    /// --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

/// Arguments of `rdctl ips list` and `rdctl ips info`.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// A repository directory or an http:// or https:// depot URL.
    repo: String,
    /// FMRI patterns: stem, optionally with publisher and a partial version.
    #[arg(value_name = "FMRI-PATTERN")]
    patterns: Vec<String>,
    /// How to trust an https:// depot.
    #[command(flatten)]
    tls: super::client::TlsArgs,
}

/// Arguments of `rdctl ips contents`.
#[derive(Debug, clap::Args)]
pub struct ContentsArgs {
    /// Print each manifest exactly as stored (checked against the catalog) instead.
    #[arg(long)]
    manifest: bool,
    #[command(flatten)]
    query: QueryArgs,
}

/// Arguments of `rdctl ips lint`.
#[derive(Debug, clap::Args)]
pub struct LintArgs {
    /// The manifest file.
    file: PathBuf,
}

/// Runs an IPS subcommand.
pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Publish(args) => publish(args),
        Command::Serve(args) => serve(args),
        Command::List(q) => with_repo(&q, |r| list(r, &patterns(&q.patterns)?)),
        Command::Info(q) => with_repo(&q, |r| info(r, &patterns(&q.patterns)?)),
        Command::Contents(a) => with_repo(&a.query, |r| {
            contents(r, &patterns(&a.query.patterns)?, a.manifest)
        }),
        Command::Lint(args) => lint(&args.file),
    }
}

fn publish(args: PublishArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read(&args.manifest)
        .with_context(|| format!("cannot read {}", args.manifest.display()))?;
    // Refuse what `rdctl ips lint` refuses, with its messages, before touching the repository.
    let findings = Manifest::lint_bytes(&text);
    let errors = findings.iter().filter(|f| f.is_error()).count();
    if !findings.is_empty() {
        let mut err = io::stderr().lock();
        report(&mut err, &args.manifest, &findings)?;
    }
    if errors > 0 {
        bail!(
            "{}: refused: {errors} error(s); nothing was published",
            args.manifest.display()
        );
    }
    let manifest = Manifest::parse_bytes(&text)
        .with_context(|| format!("{}: invalid manifest", args.manifest.display()))?;
    // A repository this command creates is removed again when the publish fails, so a
    // failed first publish leaves no empty repository behind: the directory when it was not
    // there, else only the entries it did not hold before.
    let fresh = !args.repo.join("pkg5.repository").exists();
    let existed = args.repo.exists();
    let before: std::collections::BTreeSet<std::ffi::OsString> = std::fs::read_dir(&args.repo)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
        .unwrap_or_default();
    let published = FileRepo::create(&args.repo, &args.publisher)
        .with_context(|| format!("cannot open or create {}", args.repo.display()))
        .and_then(|repo| {
            repo.publish(&args.publisher, &manifest, args.proto.as_deref())
                .with_context(|| {
                    format!(
                        "cannot publish {} into {}",
                        args.manifest.display(),
                        args.repo.display()
                    )
                })
        });
    let fmri = match published {
        Ok(f) => f,
        Err(e) => {
            if fresh && !existed {
                let _ = std::fs::remove_dir_all(&args.repo);
            } else if fresh {
                for entry in std::fs::read_dir(&args.repo)
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    if !before.contains(&entry.file_name()) {
                        let p = entry.path();
                        let _ = if p.is_dir() {
                            std::fs::remove_dir_all(&p)
                        } else {
                            std::fs::remove_file(&p)
                        };
                    }
                }
            }
            return Err(e);
        }
    };
    writeln!(io::stdout(), "{fmri}")?;
    Ok(ExitCode::SUCCESS)
}

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let repo = FileRepo::open(&args.repo)
        .with_context(|| format!("cannot open repository {}", args.repo.display()))?;
    let server = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let tls = ServerTls::from_pem_files(cert, key).context("cannot serve TLS")?;
            DepotServer::start_tls(repo, &args.listen, &tls)
        }
        _ => DepotServer::start(repo, &args.listen),
    }
    .with_context(|| format!("cannot listen on {}", args.listen))?;
    let mut out = io::stdout();
    writeln!(out, "listening on {}", server.url())?;
    out.flush()?;
    // Read-only and stateless: SIGTERM's and SIGINT's default action (ending the process) is
    // the shutdown. Until then the worker threads serve and this thread waits.
    loop {
        std::thread::park();
    }
}

fn exit(failed: bool) -> ExitCode {
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn lint(file: &Path) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let findings = Manifest::lint_bytes(&bytes);
    let mut out = io::stdout().lock();
    report(&mut out, file, &findings)?;
    Ok(exit(findings.iter().any(LintFinding::is_error)))
}

/// Prints lint findings as `FILE:LINE:COLUMN: [warning: ]MESSAGE [RULE-ID]` (`FILE: ...` for a
/// finding about the whole manifest), then `FILE: N error(s)[, M warning(s)]` when there are
/// any. `rdctl ips lint` prints them on stdout, `rdctl ips publish` on stderr.
fn report(out: &mut impl Write, file: &Path, findings: &[LintFinding]) -> io::Result<()> {
    let name = file.display();
    for f in findings {
        let warning = if f.is_error() { "" } else { "warning: " };
        match f.line {
            Some(line) => write!(out, "{name}:{line}:{}: ", f.column)?,
            None => write!(out, "{name}: ")?,
        }
        writeln!(out, "{warning}{} [{}]", f.message, f.rule)?;
    }
    let errors = findings.iter().filter(|f| f.is_error()).count();
    let warnings = findings.len() - errors;
    match (errors, warnings) {
        (0, 0) => {}
        (e, 0) => writeln!(out, "{name}: {e} error(s)")?,
        (e, w) => writeln!(out, "{name}: {e} error(s), {w} warning(s)")?,
    }
    Ok(())
}
