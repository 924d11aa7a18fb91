//! `rdctl key generate`, `rdctl sign`, `rdctl verify`, `rdctl attest`, and the signing step of
//! `rdctl build --sign-key`: cosign-compatible signatures and attestations through
//! `registry_client::signatures`, with keys and documents from the `trust` crate.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use registry_client::publish::{SignAs, attest_image, sign_image};
use registry_client::signatures::{self, Evidence, Pushed};
use registry_client::transfer::ImageRef;
use trust::cosign;
use trust::intoto::{self, Statement};
use trust::{SigningKey, VerifyingKey};
use zeroize::Zeroizing;

use super::client::ClientArgs;

/// Where a private key's password comes from.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PasswordArgs {
    /// Read the private key's password from the first line of FILE. Without it:
    /// $RDCTL_PASSWORD, then cosign's $COSIGN_PASSWORD, then a prompt on the terminal (never
    /// echoed).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
}

impl PasswordArgs {
    /// The password: the file, the environment, or the terminal (asked twice when
    /// `confirm`).
    pub fn read(&self, prompt: &str, confirm: bool) -> anyhow::Result<Zeroizing<String>> {
        if let Some(f) = &self.password_file {
            let text = Zeroizing::new(
                std::fs::read_to_string(f)
                    .with_context(|| format!("cannot read the password file {}", f.display()))?,
            );
            let line = text.lines().next().unwrap_or_default();
            return Ok(Zeroizing::new(line.to_owned()));
        }
        for var in ["RDCTL_PASSWORD", "COSIGN_PASSWORD"] {
            if let Ok(v) = std::env::var(var) {
                return Ok(Zeroizing::new(v));
            }
        }
        // rpassword reads /dev/tty with echo off; no terminal is an error, not a hang.
        let first = Zeroizing::new(rpassword::prompt_password(prompt).map_err(|e| {
            anyhow::anyhow!(
                "no password: give --password-file, set RDCTL_PASSWORD or COSIGN_PASSWORD, or run on a terminal ({e})"
            )
        })?);
        if confirm {
            let again = Zeroizing::new(
                rpassword::prompt_password("Enter the password again: ")
                    .context("cannot read the password")?,
            );
            if *again != *first {
                bail!("the passwords differ");
            }
        }
        Ok(first)
    }
}

/// Reads a private key (cosign's format, PKCS#8 encrypted or not, SEC1), asking for the
/// password only when the file is encrypted.
pub fn load_signing_key(path: &Path, password: &PasswordArgs) -> anyhow::Result<SigningKey> {
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read the key {}", path.display()))?;
    let prompt = format!("Password for {}: ", path.display());
    let key = SigningKey::from_pem(&bytes, &path.display().to_string(), &mut || {
        password.read(&prompt, false).map_err(|e| e.into())
    })?;
    Ok(key)
}

fn load_public_keys(paths: &[PathBuf]) -> anyhow::Result<Vec<VerifyingKey>> {
    paths
        .iter()
        .map(|p| {
            let bytes =
                std::fs::read(p).with_context(|| format!("cannot read the key {}", p.display()))?;
            Ok(VerifyingKey::from_pem(&bytes, &p.display().to_string())?)
        })
        .collect()
}

/// `rdctl key …`.
#[derive(Debug, clap::Subcommand)]
pub enum KeyCommand {
    /// Generate an ECDSA P-256 key pair (PREFIX.key and PREFIX.pub) cosign can use.
    Generate(KeyGenerateArgs),
}

/// The private key file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyFormat {
    /// cosign's `ENCRYPTED SIGSTORE PRIVATE KEY` (scrypt + NaCl secretbox): `cosign sign
    /// --key` reads it as it is.
    Cosign,
    /// PKCS#8 PEM, encrypted (PBES2) unless --no-password; cosign reads only the unencrypted
    /// form, through `cosign import-key-pair`.
    Pkcs8,
}

/// Arguments of `rdctl key generate`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl key generate                                   writes cosign.key and cosign.pub, asks for a password
  COSIGN_PASSWORD=... rdctl key generate --output-key-prefix release
  rdctl key generate --output-key-prefix ci --password-file ./pw.txt --json
  rdctl key generate --format pkcs8 --no-password --output-key-prefix plain

The private key is written in cosign's own encrypted format by default, so `cosign sign --key
PREFIX.key` (with COSIGN_PASSWORD) and `rdctl sign --key PREFIX.key` both use it; PREFIX.pub is
the PUBLIC KEY PEM `cosign public-key` prints. Existing files are never overwritten. The key id
printed is sha256 of the public key (what rdctl verify and the worker's policy name it by).

Exit status: 0 written, 2 failed.")]
pub struct KeyGenerateArgs {
    /// Write PREFIX.key (mode 0600) and PREFIX.pub.
    #[arg(long, value_name = "PREFIX", default_value = "cosign")]
    pub output_key_prefix: PathBuf,
    /// The private key file's format.
    #[arg(long, value_enum, default_value_t = KeyFormat::Cosign)]
    pub format: KeyFormat,
    /// Write the private key unencrypted (PKCS#8 `PRIVATE KEY`; needs --format pkcs8).
    #[arg(long)]
    pub no_password: bool,
    #[command(flatten)]
    pub password: PasswordArgs,
    /// Print the file names and key id as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `rdctl key …`.
pub fn key(cmd: KeyCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        KeyCommand::Generate(a) => key_generate(a),
    }
}

fn with_ext(prefix: &Path, ext: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

fn key_generate(args: KeyGenerateArgs) -> anyhow::Result<ExitCode> {
    if args.no_password && args.format == KeyFormat::Cosign {
        bail!(
            "--no-password: cosign's key format is always encrypted (an empty password is allowed); use --format pkcs8 --no-password for a plain key"
        );
    }
    let key_path = with_ext(&args.output_key_prefix, "key");
    let pub_path = with_ext(&args.output_key_prefix, "pub");
    for p in [&key_path, &pub_path] {
        if p.exists() {
            bail!("{} exists: not overwriting it", p.display());
        }
    }
    let password = if args.no_password {
        None
    } else {
        Some(args.password.read("Password for the new key: ", true)?)
    };
    let pair = trust::generate();
    let pem = match (args.format, &password) {
        (KeyFormat::Cosign, Some(pw)) => pair.signing.to_cosign_pem(pw)?,
        (KeyFormat::Pkcs8, pw) => pair.signing.to_pkcs8_pem(pw.as_ref().map(|p| p.as_str()))?,
        (KeyFormat::Cosign, None) => unreachable!("refused above"),
    };
    write_new(&key_path, pem.as_bytes(), 0o600)?;
    if let Err(e) = write_new(&pub_path, pair.verifying().to_pem().as_bytes(), 0o644) {
        let _ = std::fs::remove_file(&key_path);
        return Err(e);
    }
    let id = pair.verifying().key_id().as_str().to_owned();
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = serde_json::json!({
            "private_key": key_path.display().to_string(),
            "public_key": pub_path.display().to_string(),
            "key_id": id,
            "format": match args.format { KeyFormat::Cosign => "cosign", KeyFormat::Pkcs8 => "pkcs8" },
            "encrypted": password.is_some(),
        });
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        writeln!(out, "private key {}", key_path.display())?;
        writeln!(out, "public key  {}", pub_path.display())?;
        writeln!(out, "key id      {id}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates `path` (never replacing a file) with `mode` and writes `bytes`.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))
}

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
