//! `rdctl sign` and `rdctl attest`: signatures and in-toto attestations as cosign writes them.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use registry_client::publish::{SignAs, attest_image, sign_image};
use registry_client::signatures::{self, Pushed};
use registry_client::transfer::ImageRef;
use trust::intoto::{self, Statement};

use super::{PasswordArgs, load_signing_key};
use crate::commands::client::ClientArgs;

/// Where and how a signature or attestation is written (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SignatureFormat {
    /// cosign v2's layout: layers of the manifest at the sha256-<hex>.sig / .att tag (read by
    /// cosign v2 and v3, policy engines and rdctl).
    Legacy,
    /// cosign v3's default: a sigstore bundle (v0.3) as an OCI 1.1 referrer (read by cosign v3
    /// and rdctl; cosign v2 needs a trusted root to read it).
    Bundle,
}

/// Arguments of `rdctl sign`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl sign --key cosign.key 127.0.0.1:5000/zones/web:1.0
  rdctl sign --key cosign.key -a git=4f2c1e -a by=ci 127.0.0.1:5000/zones/web@sha256:...
  rdctl sign --key cosign.key --password-file ./pw.txt oci:./image:1.0
  rdctl sign --key cosign.key --no-referrer --json reg.example/zones/web:1.0
  rdctl sign --key cosign.key --format bundle 127.0.0.1:5000/zones/web:1.0   # as cosign v3

A tag is resolved once: the signature is over the manifest digest, and its payload names the
repository (HOST/REPO) as cosign's does. It is added to the manifest at the sha256-<hex>.sig
tag, where cosign verify looks; a registry with the referrers API also gets it as an OCI 1.1
referrer unless --no-referrer. In a layout (oci:DIR[:TAG]) it is written as cosign save lays it
out, so `cosign verify --local-image DIR` reads it, and rdctl push carries it along.

--format bundle writes what cosign v3 writes by default instead: a sigstore bundle (a DSSE
envelope of an in-toto statement of type https://sigstore.dev/cosign/sign/v1) as an OCI 1.1
referrer, or in the sha256-<hex> tag-schema index at a registry without the referrers API.
The default stays legacy because both cosign v2 and v3 verify it offline with a key.

Exit status: 0 signed, 2 failed.")]
pub struct SignArgs {
    /// The image: `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]` or `oci:DIR[:TAG|@DIGEST]`.
    pub reference: String,
    /// The private key (cosign's format or PKCS#8 PEM).
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
    /// An annotation for the payload's `optional` section, KEY=VALUE (repeatable; cosign's
    /// -a).
    #[arg(long = "annotation", short = 'a', value_name = "KEY=VALUE")]
    pub annotations: Vec<String>,
    /// Do not also push the signature as an OCI 1.1 referrer (legacy format).
    #[arg(long)]
    pub no_referrer: bool,
    /// `legacy` (cosign v2's .sig tag) or `bundle` (cosign v3's sigstore bundle referrer).
    #[arg(long, value_enum, default_value_t = SignatureFormat::Legacy)]
    pub format: SignatureFormat,
    #[command(flatten)]
    pub password: PasswordArgs,
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print what was written as JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_annotations(list: &[String]) -> anyhow::Result<Option<BTreeMap<String, String>>> {
    if list.is_empty() {
        return Ok(None);
    }
    let mut out = BTreeMap::new();
    for a in list {
        let Some((k, v)) = a.split_once('=') else {
            bail!("--annotation {a:?}: expected KEY=VALUE");
        };
        if k.is_empty() {
            bail!("--annotation {a:?}: empty key");
        }
        out.insert(k.to_owned(), v.to_owned());
    }
    Ok(Some(out))
}

fn print_pushed(json: bool, what: &str, r: &ImageRef, p: &Pushed) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        let mut doc = serde_json::to_value(p)?;
        doc["reference"] = serde_json::json!(r.to_string());
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        if p.tag.is_empty() {
            writeln!(
                out,
                "{what} {} as a sigstore bundle: referrer {}",
                p.subject,
                p.referrer.as_ref().unwrap_or(&p.manifest)
            )?;
            return Ok(());
        }
        writeln!(
            out,
            "{what} {} at {} ({} layer(s){}){}",
            p.subject,
            p.tag,
            p.layers,
            if p.layer_added {
                ""
            } else {
                ", already signed by this key"
            },
            p.referrer
                .as_ref()
                .map(|d| format!("; referrer {d}"))
                .unwrap_or_default()
        )?;
    }
    Ok(())
}

/// Runs `rdctl sign`.
pub fn sign(args: SignArgs) -> anyhow::Result<ExitCode> {
    let target = ImageRef::parse(&args.reference)?;
    let annotations = parse_annotations(&args.annotations)?;
    let key = load_signing_key(&args.key, &args.password)?;
    let client = args.client.client()?;
    let pushed = crate::runtime::block_on(async {
        let subject = signatures::resolve(&client, &target)
            .await
            .with_context(|| format!("cannot resolve {target}"))?;
        sign_image(
            &client,
            &target,
            &subject,
            &signatures::docker_reference(&target),
            &key,
            annotations.as_ref(),
            match args.format {
                SignatureFormat::Legacy => SignAs::Legacy {
                    also_referrer: !args.no_referrer,
                },
                SignatureFormat::Bundle => SignAs::Bundle,
            },
        )
        .await
        .map_err(anyhow::Error::from)
    })??;
    print_pushed(args.json, "signed", &target, &pushed)?;
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `rdctl attest`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl attest --key cosign.key --type spdxjson --predicate sbom.spdx.json 127.0.0.1:5000/zones/web:1.0
  rdctl attest --key cosign.key --type slsaprovenance1 --predicate provenance.json oci:./image:1.0
  rdctl attest --key cosign.key --type spdxjson --predicate new.spdx.json --replace reg.example/zones/web:1.0

TYPE is one of cosign's --type names (custom, spdx, spdxjson, cyclonedx, slsaprovenance,
slsaprovenance02, slsaprovenance1, link, vuln, openvex) or a predicate type URI. The predicate
is wrapped in an in-toto v0.1 statement about the image's digest, signed into a DSSE envelope
and added to the sha256-<hex>.att manifest, as cosign attest does; --replace first drops the
attestations of the same predicate type. `cosign verify-attestation --type TYPE` reads it.

Exit status: 0 attached, 2 failed.")]
pub struct AttestArgs {
    /// The image: `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]` or `oci:DIR[:TAG|@DIGEST]`.
    pub reference: String,
    /// The private key (cosign's format or PKCS#8 PEM).
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
    /// The predicate type: a cosign --type name or a URI.
    #[arg(long = "type", value_name = "TYPE", default_value = "custom")]
    pub predicate_type: String,
    /// The predicate file (JSON; for `custom` and `spdx`, any text).
    #[arg(long, value_name = "FILE")]
    pub predicate: PathBuf,
    /// Replace the attestations of the same predicate type instead of adding one (legacy
    /// format; bundles are separate referrers, each kept).
    #[arg(long)]
    pub replace: bool,
    /// `legacy` (cosign v2's .att tag) or `bundle` (cosign v3's sigstore bundle referrer).
    #[arg(long, value_enum, default_value_t = SignatureFormat::Legacy)]
    pub format: SignatureFormat,
    #[command(flatten)]
    pub password: PasswordArgs,
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print what was written as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The predicate for a cosign `--type` from the file's bytes, as cosign builds it.
fn predicate_for(type_name: &str, bytes: &[u8], file: &Path) -> anyhow::Result<serde_json::Value> {
    let json = || -> anyhow::Result<serde_json::Value> {
        serde_json::from_slice(bytes).with_context(|| {
            format!(
                "{}: the --type {type_name} predicate is not JSON",
                file.display()
            )
        })
    };
    let text = || {
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .with_context(|| format!("{}: not UTF-8 text", file.display()))
    };
    Ok(match type_name {
        "custom" => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            serde_json::json!({"Data": text()?, "Timestamp": validator::rfc3339(now)})
        }
        "spdx" => serde_json::Value::String(text()?),
        "slsaprovenance1" => {
            let v = json()?;
            for k in ["buildDefinition", "runDetails"] {
                if v.get(k).is_none() {
                    bail!(
                        "{}: an SLSA v1 provenance needs `{k}` at the top level",
                        file.display()
                    );
                }
            }
            v
        }
        _ => {
            let v = json()?;
            if !v.is_object() {
                bail!("{}: the predicate must be a JSON object", file.display());
            }
            v
        }
    })
}

/// Runs `rdctl attest`.
pub fn attest(args: AttestArgs) -> anyhow::Result<ExitCode> {
    let target = ImageRef::parse(&args.reference)?;
    let Some(uri) = intoto::predicate_type_uri(&args.predicate_type) else {
        bail!(
            "--type {:?}: not one of cosign's names ({}) nor a URI",
            args.predicate_type,
            intoto::PREDICATE_SHORT_NAMES
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let bytes = std::fs::read(&args.predicate)
        .with_context(|| format!("cannot read {}", args.predicate.display()))?;
    let predicate = predicate_for(&args.predicate_type, &bytes, &args.predicate)?;
    let key = load_signing_key(&args.key, &args.password)?;
    let client = args.client.client()?;
    let pushed = crate::runtime::block_on(async {
        let subject = signatures::resolve(&client, &target)
            .await
            .with_context(|| format!("cannot resolve {target}"))?;
        let statement = Statement::for_image(
            &signatures::docker_reference(&target),
            &subject.digest,
            uri,
            predicate,
        );
        attest_image(
            &client,
            &target,
            &subject,
            &statement,
            &key,
            args.replace,
            args.format == SignatureFormat::Bundle,
        )
        .await
        .map_err(anyhow::Error::from)
    })??;
    print_pushed(args.json, "attested", &target, &pushed)?;
    Ok(ExitCode::SUCCESS)
}
