//! `rdctl ips list`, `info` and `contents`: packages of a file repository or a depot, read
//! through one [`Query`] seam.

use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use ips_bridge::{
    ActionKind, DepotClient, FileRepo, Fmri, Manifest, PackageRef, PackageRepository,
};

use super::{QueryArgs, exit};

/// Opens REPO as a file repository or, for http(s):// URLs, a depot (with the TLS flags),
/// and runs `f` on it.
pub(super) fn with_repo(
    q: &QueryArgs,
    f: impl FnOnce(&dyn Query) -> anyhow::Result<ExitCode>,
) -> anyhow::Result<ExitCode> {
    let repo = q.repo.as_str();
    if repo.starts_with("http://") || repo.starts_with("https://") {
        let client = DepotClient::builder(repo)
            .tls(q.tls.depot_tls_warned()?)
            .connect()
            .with_context(|| format!("cannot reach depot {repo}"))?;
        f(&client)
    } else {
        let file =
            FileRepo::open(repo).with_context(|| format!("cannot open repository {repo}"))?;
        f(&file)
    }
}

pub(super) fn patterns(args: &[String]) -> anyhow::Result<Vec<Fmri>> {
    args.iter()
        .map(|p| Fmri::parse(p).with_context(|| format!("invalid FMRI pattern {p:?}")))
        .collect()
}

/// The [`PackageRepository`] calls the commands make, with errors turned into anyhow, so one
/// code path serves file repositories and depots.
pub(super) trait Query {
    fn matching(&self, patterns: &[Fmri]) -> anyhow::Result<Vec<PackageRef>>;
    fn find(&self, pattern: &Fmri) -> anyhow::Result<Option<PackageRef>>;
    fn manifest_bytes(&self, package: &PackageRef) -> anyhow::Result<Vec<u8>>;
    fn verify(&self, package: &Fmri, action: &ips_bridge::Action) -> anyhow::Result<u64>;
}

impl<R: PackageRepository> Query for R {
    fn matching(&self, patterns: &[Fmri]) -> anyhow::Result<Vec<PackageRef>> {
        Ok(PackageRepository::matching(self, patterns)?)
    }
    fn find(&self, pattern: &Fmri) -> anyhow::Result<Option<PackageRef>> {
        Ok(PackageRepository::find(self, pattern)?)
    }
    fn manifest_bytes(&self, package: &PackageRef) -> anyhow::Result<Vec<u8>> {
        Ok(PackageRepository::manifest_bytes(self, package)?)
    }
    fn verify(&self, package: &Fmri, action: &ips_bridge::Action) -> anyhow::Result<u64> {
        Ok(self.payload(package, action, &mut io::sink())?)
    }
}

/// Reports a problem with one package on stderr (the command goes on with the next one).
fn problem(e: &anyhow::Error) {
    eprintln!("rdctl: {e:#}");
}

pub(super) fn list(repo: &dyn Query, patterns: &[Fmri]) -> anyhow::Result<ExitCode> {
    let found = repo.matching(patterns)?;
    let mut missing = false;
    for p in patterns {
        let matched = found.iter().any(|r| match p.publisher() {
            Some(_) => r.fmri.matches(p),
            None => p
                .clone()
                .with_publisher(r.fmri.publisher())
                .is_ok_and(|p| r.fmri.matches(&p)),
        });
        if !matched {
            problem(&anyhow::anyhow!("no package matches {p}"));
            missing = true;
        }
    }
    let mut out = io::stdout().lock();
    for r in &found {
        writeln!(out, "{}", r.fmri)?;
    }
    Ok(exit(missing))
}

/// The newest package per pattern with its checked, parsed manifest; problems are reported
/// and counted in `failed`.
fn resolve(
    repo: &dyn Query,
    patterns: &[Fmri],
    failed: &mut bool,
) -> anyhow::Result<Vec<(PackageRef, Vec<u8>, Manifest)>> {
    if patterns.is_empty() {
        bail!("give at least one FMRI pattern");
    }
    let mut out = Vec::new();
    for p in patterns {
        let Some(package) = repo.find(p)? else {
            problem(&anyhow::anyhow!("no package matches {p}"));
            *failed = true;
            continue;
        };
        let checked = repo.manifest_bytes(&package).and_then(|bytes| {
            let m = Manifest::parse_bytes(&bytes)
                .with_context(|| format!("package {}: invalid manifest", package.fmri))?;
            Ok((bytes, m))
        });
        match checked {
            Ok((bytes, m)) => out.push((package, bytes, m)),
            Err(e) => {
                problem(&e);
                *failed = true;
            }
        }
    }
    Ok(out)
}

pub(super) fn info(repo: &dyn Query, patterns: &[Fmri]) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    let packages = resolve(repo, patterns, &mut failed)?;
    let mut out = io::stdout().lock();
    for (i, (package, _, manifest)) in packages.iter().enumerate() {
        let (mut verified, mut bytes, mut bad) = (0usize, 0u64, 0usize);
        for a in manifest.actions().iter().filter(|a| has_content(a.kind())) {
            match repo.verify(&package.fmri, a) {
                Ok(n) => {
                    verified += 1;
                    bytes += n;
                }
                Err(e) => {
                    problem(&e);
                    bad += 1;
                }
            }
        }
        failed |= bad > 0;
        let attr = |name: &str| manifest.attribute(name).map(|v| v.join(" "));
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(out, "        Name: {}", package.fmri.stem())?;
        for (label, name) in [
            ("     Summary", "pkg.summary"),
            (" Description", "pkg.description"),
            ("    Category", "info.classification"),
        ] {
            if let Some(v) = attr(name) {
                writeln!(out, "{label}: {v}")?;
            }
        }
        writeln!(
            out,
            "   Publisher: {}",
            package.fmri.publisher().unwrap_or("-")
        )?;
        if let Some(v) = package.fmri.version() {
            writeln!(out, "     Version: {v}")?;
        }
        writeln!(out, "        FMRI: {}", package.fmri)?;
        writeln!(
            out,
            "Manifest SHA-1: {}",
            package.manifest_sha1.as_deref().unwrap_or("-")
        )?;
        writeln!(out, "     Actions: {}", manifest.actions().len())?;
        writeln!(
            out,
            "    Payloads: {verified} verified, {bytes} bytes{}",
            if bad > 0 {
                format!(", {bad} FAILED")
            } else {
                String::new()
            }
        )?;
    }
    Ok(exit(failed))
}

fn has_content(kind: ActionKind) -> bool {
    matches!(kind, ActionKind::File | ActionKind::License)
}

pub(super) fn contents(repo: &dyn Query, patterns: &[Fmri], raw: bool) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    let packages = resolve(repo, patterns, &mut failed)?;
    let mut out = io::stdout().lock();
    for (package, bytes, manifest) in &packages {
        if raw {
            out.write_all(bytes)?;
            continue;
        }
        for a in manifest.actions() {
            let key = a.key().unwrap_or("-");
            let detail = match a.kind() {
                k if has_content(k) => match repo.verify(&package.fmri, a) {
                    Ok(n) => format!("{n} bytes verified"),
                    Err(e) => {
                        problem(&e);
                        failed = true;
                        "CORRUPT".to_owned()
                    }
                },
                ActionKind::Link | ActionKind::Hardlink => {
                    format!("-> {}", a.get("target").unwrap_or("?"))
                }
                ActionKind::Set => a.get_all("value").join(" "),
                ActionKind::Dir => a.get("mode").unwrap_or("").to_owned(),
                ActionKind::User => format!("uid={}", a.get("uid").unwrap_or("-")),
                ActionKind::Group => format!("gid={}", a.get("gid").unwrap_or("-")),
                ActionKind::Depend => a.get("type").unwrap_or("").to_owned(),
                _ => String::new(),
            };
            writeln!(out, "{}\t{}\t{key}\t{detail}", package.fmri, a.kind())?;
        }
    }
    Ok(exit(failed))
}
