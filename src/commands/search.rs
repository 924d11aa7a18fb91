//! `rdctl search`: which images at a registry hold a package, from the registry's package index
//! (`GET /v2/_rd/packages`, docs/api.md).

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::commands::client::ClientArgs;

/// Arguments of `rdctl search`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl search --package openssl 127.0.0.1:5000
  rdctl search --package 'library/security/openssl@<3.0' registry.example:5000
  rdctl search --package 'demo/*@>=2.1' 127.0.0.1:5000 --json | jq -r '.images[].repository'

NAME is a glob over package names (* any characters, ? one), matching the whole name or the
part after a / (openssl matches library/security/openssl). OP is <, <=, =, >= or > (none
means =); VERSION is a pkg(5) version compared at the precision it is written with: release
numbers component by component, then the branch and timestamp if given (=2.1 matches 2.1.3).
Only repositories the caller may pull are searched (rdctl login for a registry with [auth]).
Images pushed before the registry had a package index appear after `rdctl registry reindex`.
NAME may be an FMRI, pkg:/NAME (pkg://PUBLISHER/NAME is refused: the index keeps no
publishers). Nothing found is said on stdout (stderr stays empty); a registry without the
package index (distribution, zot) is named as having no package search API.
Exit status: 0 searched (also when nothing matched), 2 the search could not run.")]
pub struct SearchArgs {
    /// The package: NAME or NAME@OPVERSION (like openssl, 'openssl@<3.0', 'demo/*@>=2.1').
    #[arg(long, value_name = "NAME[@OP VERSION]")]
    pub package: String,
    /// The registry, HOST[:PORT].
    #[arg(value_name = "HOST")]
    pub host: String,
    /// Stop after this many images.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Registry credentials and TLS.
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Parses `NAME[@OP VERSION]` with the parser the admission policy's `deny_packages` uses
/// ([`validator::PackageQuery`]), checking the constraint before anything is sent. The
/// package index does not record publishers, so `pkg://PUBLISHER/NAME` is refused.
fn split_package(s: &str) -> anyhow::Result<(String, Option<validator::Constraint>)> {
    let q = validator::PackageQuery::parse(s).map_err(|e| anyhow::anyhow!("--package {e}"))?;
    if let Some(p) = q.publisher() {
        anyhow::bail!(
            "--package {s:?}: the package search does not filter by publisher ({p}); give pkg:/{} or {}",
            q.name(),
            q.name()
        );
    }
    Ok((q.name().to_owned(), q.constraint().cloned()))
}

/// Runs `rdctl search`.
pub fn run(args: SearchArgs) -> anyhow::Result<ExitCode> {
    let (name, constraint) = split_package(&args.package)?;
    let name = name.as_str();
    let client = args.client.client()?;
    let host = args
        .host
        .strip_prefix("docker://")
        .unwrap_or(&args.host)
        .trim_end_matches('/');
    if host.is_empty() || host.contains('/') || host.starts_with("oci:") {
        anyhow::bail!(
            "search takes a registry HOST[:PORT], not {:?}: it searches every repository there",
            args.host
        );
    }
    let version = constraint.as_ref().map(ToString::to_string);
    let hits = crate::runtime::block_on(client.search_packages(
        host,
        name,
        version.as_deref(),
        args.limit,
    ))?
    .with_context(|| format!("cannot search the packages of {host}"))?;
    let mut w = std::io::stdout().lock();
    if args.json {
        let doc = serde_json::json!({
            "registry": host,
            "package": name,
            "version": version,
            "images": hits,
        });
        serde_json::to_writer_pretty(&mut w, &doc)?;
        writeln!(w)?;
        return Ok(ExitCode::SUCCESS);
    }
    if hits.is_empty() {
        // An answer, not a failure: on stdout, and stderr stays empty.
        writeln!(
            w,
            "no image at {host} holds a package matching {}",
            args.package
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = vec![[
        "REPOSITORY".to_owned(),
        "TAGS".to_owned(),
        "DIGEST".to_owned(),
        "PACKAGE".to_owned(),
    ]];
    for h in &hits {
        let tags = if h.tags.is_empty() {
            "<none>".to_owned()
        } else {
            h.tags.join(",")
        };
        for p in &h.packages {
            let fmri = p.fmri.clone().unwrap_or_else(|| {
                format!(
                    "pkg://{}/{}@{}",
                    p.publisher.as_deref().unwrap_or("?"),
                    p.name,
                    p.version.as_deref().unwrap_or("?")
                )
            });
            rows.push([
                h.repository.clone(),
                tags.clone(),
                h.digest.to_string(),
                fmri,
            ]);
        }
    }
    let widths: Vec<usize> = (0..3)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    for r in rows {
        writeln!(
            w,
            "{:<w0$}  {:<w1$}  {:<w2$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_arguments() {
        let (n, c) = split_package("openssl").unwrap();
        assert_eq!((n.as_str(), c), ("openssl", None));
        let (n, _) = split_package("pkg:/library/security/openssl@<3.0").unwrap();
        assert_eq!(n, "library/security/openssl");
        let e = split_package("pkg://openindiana.org/openssl").unwrap_err();
        assert!(
            e.to_string().contains("does not filter by publisher"),
            "{e}"
        );
        let (n, c) = split_package("demo/*@>= 2.1").unwrap();
        assert_eq!(n, "demo/*");
        assert_eq!(c.unwrap().to_string(), ">=2.1");
        assert!(split_package("@<1").is_err());
        assert!(split_package("x@<").is_err());
        assert!(split_package("x@~1").is_err());
    }
}
