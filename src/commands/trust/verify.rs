//! `rdctl verify`: which signatures and attestations verify with the given keys, and why the
//! others do not.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use registry_client::signatures::{self, Evidence};
use registry_client::transfer::ImageRef;
use trust::cosign;
use trust::intoto::{self};

use super::load_public_keys;
use crate::commands::client::ClientArgs;

/// Arguments of `rdctl verify`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl verify --key cosign.pub 127.0.0.1:5000/zones/web:1.0
  rdctl verify --key alice.pub --key bob.pub --attestation spdxjson --attestation slsaprovenance1 reg.example/zones/web:1.0
  rdctl verify --key cosign.pub --json oci:./image:1.0 | jq '.signatures[].key_id'

Reads the image's signatures and attestations where cosign keeps them (the sha256-<hex>.sig
and .att tags) and its cosign referrers, cosign v3's sigstore bundles included (referrers API or
tag schema; in a layout, index.json),
and checks every one with the given public keys, as `cosign verify --key K
--insecure-ignore-tlog` and `cosign verify-attestation` do. It prints who signed which digest
and which attestations verified, and for each signature that did not verify, why: signed by
another key or a payload changed after signing (a verifier cannot tell the two apart), over
another digest (a signature copied from another image), or a payload
that does not match its digest (tampered).

Exit status: 0 at least one signature by a given key verified and every --attestation type
has a verified attestation; 1 not (the reason on stderr, and in --json); 2 the image or keys
could not be read.")]
pub struct VerifyArgs {
    /// The image: `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]` or `oci:DIR[:TAG|@DIGEST]`.
    pub reference: String,
    /// A public key (PUBLIC KEY PEM, as `cosign public-key` prints); repeatable.
    #[arg(long, value_name = "FILE", required = true)]
    pub key: Vec<PathBuf>,
    /// Also require a verified attestation of this predicate type (a cosign --type name or a
    /// URI); repeatable.
    #[arg(long = "attestation", value_name = "TYPE")]
    pub attestations: Vec<String>,
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print the result as JSON (also when verification fails).
    #[arg(long)]
    pub json: bool,
}

/// Why nothing verified, in one sentence: how many signatures were found and why each failed.
pub fn refusal(ev: &Evidence) -> String {
    let rejected: Vec<_> = ev.rejected_signatures().collect();
    if rejected.is_empty() {
        return format!(
            "no signatures found for {} (looked at the {} tag and the image's referrers, sigstore bundles included)",
            ev.subject,
            cosign::signature_tag(&ev.subject)
        );
    }
    let mut parts: Vec<String> = Vec::new();
    let count = |reason: &str| rejected.iter().filter(|r| r.reason == reason).count();
    let n = count("bad_signature");
    if n > 0 {
        parts.push(format!(
            "{n} that do not verify with the given key(s): another key, or the payload was changed after signing"
        ));
    }
    let others: Vec<&str> = rejected
        .iter()
        .filter_map(|r| r.other_digest.as_deref())
        .collect();
    if !others.is_empty() {
        parts.push(format!(
            "{} over another digest ({})",
            others.len(),
            others.join(", ")
        ));
    }
    let n = count("payload_tampered");
    if n > 0 {
        parts.push(format!(
            "{n} with a tampered payload (its bytes do not match the layer digest)"
        ));
    }
    let n = rejected.len() - count("bad_signature") - others.len() - count("payload_tampered");
    if n > 0 {
        parts.push(format!("{n} unreadable or malformed"));
    }
    format!(
        "no signature by the given key(s): {} signature(s) found: {}",
        rejected.len(),
        parts.join(", ")
    )
}

/// Runs `rdctl verify`.
pub fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let target = ImageRef::parse(&args.reference)?;
    let keys = load_public_keys(&args.key)?;
    let mut wanted: Vec<(String, String)> = Vec::new();
    for t in &args.attestations {
        let Some(uri) = intoto::predicate_type_uri(t) else {
            bail!("--attestation {t:?}: not one of cosign's --type names nor a URI");
        };
        wanted.push((t.clone(), uri.to_owned()));
    }
    let client = args.client.client()?;
    let (subject, ev) = crate::runtime::block_on(async {
        let subject = signatures::resolve(&client, &target)
            .await
            .with_context(|| format!("cannot resolve {target}"))?;
        let ev = signatures::fetch_evidence(&client, &target, &subject.digest, &keys)
            .await
            .with_context(|| format!("cannot read the signatures of {target}"))?;
        anyhow::Ok((subject, ev))
    })??;
    let missing: Vec<&(String, String)> = wanted
        .iter()
        .filter(|(_, uri)| !ev.attestations.iter().any(|a| &a.predicate_type == uri))
        .collect();
    let reason = if ev.signatures.is_empty() {
        Some(refusal(&ev))
    } else if !missing.is_empty() {
        Some(format!(
            "no verified attestation of type {} by the given key(s)",
            missing
                .iter()
                .map(|(t, u)| if t == u {
                    t.clone()
                } else {
                    format!("{t} ({u})")
                })
                .collect::<Vec<_>>()
                .join(", ")
        ))
    } else {
        None
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut doc = serde_json::to_value(&ev)?;
        doc["reference"] = serde_json::json!(target.to_string());
        doc["digest"] = serde_json::json!(subject.digest.to_string());
        doc["verified"] = serde_json::json!(reason.is_none());
        doc["reason"] = serde_json::json!(reason);
        doc["policy_evidence"] = serde_json::json!({
            "signatures": ev.policy_evidence().signatures,
            "attestations": ev.policy_evidence().attestations,
        });
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        for s in &ev.signatures {
            let ann = s
                .annotations
                .iter()
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => format!(" {k}={s}"),
                    v => format!(" {k}={v}"),
                })
                .collect::<String>();
            // cosign v3's statements name no repository: say nothing rather than "for ".
            let name = if s.docker_reference.is_empty() {
                String::new()
            } else {
                format!(" for {}", s.docker_reference)
            };
            writeln!(
                out,
                "signature   {} by key {}{name} ({}){}",
                s.digest, s.key_id, s.origin.found_by, ann
            )?;
        }
        for a in &ev.attestations {
            writeln!(
                out,
                "attestation {} by key {} of {} ({})",
                ev.subject, a.key_id, a.predicate_type, a.origin.found_by
            )?;
        }
        for r in &ev.rejected {
            writeln!(
                out,
                "rejected    {} layer {}: {}",
                r.kind, r.layer, r.message
            )?;
        }
    }
    match reason {
        None => Ok(ExitCode::SUCCESS),
        Some(r) => {
            eprintln!("rdctl: {target} ({}): {r}", subject.digest);
            Ok(ExitCode::from(1))
        }
    }
}
