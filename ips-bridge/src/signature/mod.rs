//! pkg(5) manifest signatures: `signature` actions as `pkgsign` writes them, the exact text
//! they sign, and pkg's signature policies.
//!
//! A `signature` action names the signing certificate by the SHA-1 of its PEM file (the
//! positional hash; the certificate is a payload in the repository's file store like any
//! other), the intermediate certificates in `chain` (SHA-1s, with `chain.sizes`,
//! `chain.chashes` and `pkg.chain.*` hashes), `algorithm` (`rsa-sha256`, `rsa-sha384`,
//! `rsa-sha512`, or a bare `sha256`… for an unsigned digest) and `value`, the hex signature.
//!
//! What is signed (pkg5's `Action.sig_str` and `SignatureAction.actions_to_str`): every
//! action of the manifest but the other signature actions, each written as name, payload hash
//! and then every attribute in key order, repeated values sorted, values quoted only when
//! they hold a space, a quote or `$(` or are empty; the signature action itself with
//! `value=""`; the lines sorted and joined with newlines, no newline at the end.
//!
//! Policies as pkg's `signature-policy`: `ignore` checks nothing; `verify` checks every
//! signature there is; `require-signatures` also needs at least one signature made with a key
//! to verify. A signature pkg could not verify either (tagged with a variant, a newer
//! `version`, an unknown algorithm) is skipped, as pkg skips it.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::action::{Action, ActionKind};
use crate::manifest::Manifest;

mod x509;

pub use x509::TrustAnchors;
use x509::{Cert, Sha2};

/// pkg's `signature-policy` values this crate implements (`require-names` is not one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SignaturePolicy {
    /// Signatures are not looked at.
    #[default]
    Ignore,
    /// Every signature present must verify; unsigned packages pass.
    Verify,
    /// As `Verify`, and each package needs at least one verified signature made with a key.
    RequireSignatures,
}

impl SignaturePolicy {
    /// The name pkg uses.
    pub fn name(self) -> &'static str {
        match self {
            SignaturePolicy::Ignore => "ignore",
            SignaturePolicy::Verify => "verify",
            SignaturePolicy::RequireSignatures => "require-signatures",
        }
    }
}

impl fmt::Display for SignaturePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SignaturePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ignore" => Ok(SignaturePolicy::Ignore),
            "verify" => Ok(SignaturePolicy::Verify),
            "require-signatures" => Ok(SignaturePolicy::RequireSignatures),
            "require-names" => Err(
                "\"require-names\" is not supported: use \"require-signatures\" with a trust \
                 anchor directory holding only the CAs you accept"
                    .into(),
            ),
            other => Err(format!(
                "{other:?}: expected \"ignore\", \"verify\" or \"require-signatures\""
            )),
        }
    }
}

/// Why a manifest's signatures were refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The policy needs a signature and none verified.
    #[error("not signed: {reason}")]
    Unsigned {
        /// No signature action, or why the ones there did not count.
        reason: String,
    },
    /// A signature action's attributes are not what pkgsign writes.
    #[error("signature action: {message}")]
    Malformed {
        /// What is wrong.
        message: String,
    },
    /// The signed text does not give the signature value.
    #[error(
        "signature by {subject} ({algorithm}) does not match the manifest: the manifest was changed after signing, or the value was"
    )]
    Mismatch {
        /// The signing certificate's subject, or `digest` for an unsigned digest.
        subject: String,
        /// The `algorithm` attribute.
        algorithm: String,
    },
    /// A certificate could not be fetched from the repository.
    #[error("certificate {hash}: cannot fetch it from the repository")]
    Fetch {
        /// The certificate's SHA-1 (its payload name).
        hash: String,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A certificate does not parse or has a key pkg cannot use.
    #[error("{what}: {message}")]
    BadCertificate {
        /// The certificate (`certificate <sha1>`, a subject, or a trust anchor file).
        what: String,
        /// What is wrong.
        message: String,
    },
    /// A certificate's extensions do not allow the use the chain makes of it.
    #[error("certificate {subject}: {problem}")]
    CertificateUse {
        /// The certificate's subject.
        subject: String,
        /// What pkg would refuse.
        problem: String,
    },
    /// The chain ends in a self-signed certificate no trust anchor verifies.
    #[error("certificate {subject} is self-signed and not among the trust anchors {anchors}")]
    UntrustedSelfSigned {
        /// Its subject.
        subject: String,
        /// The trust anchors.
        anchors: String,
    },
    /// No trust anchor or intermediate certificate signs a certificate of the chain.
    #[error(
        "certificate {subject}: its issuer {issuer} is neither a trust anchor in {anchors} nor an intermediate certificate of the signature's chain that verifies it{}",
        if problems.is_empty() { String::new() } else { format!(" ({})", problems.join("; ")) }
    )]
    BrokenChain {
        /// The certificate whose issuer was not found.
        subject: String,
        /// Its issuer's name.
        issuer: String,
        /// The trust anchors.
        anchors: String,
        /// Why candidate intermediates were refused.
        problems: Vec<String>,
    },
    /// The trust anchor directory could not be read.
    #[error("trust anchors {path}: cannot read")]
    TrustAnchorIo {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The trust anchor directory holds no certificate.
    #[error("trust anchors {path}: no certificate in the directory")]
    NoTrustAnchors {
        /// The directory.
        path: PathBuf,
    },
}

/// What verifying a manifest's signatures found (when the policy was met).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignatureReport {
    /// Subjects of the certificates whose signatures verified.
    pub signed_by: Vec<String>,
    /// Unsigned digests (`algorithm=sha256` without a certificate) that matched.
    pub digests: usize,
    /// Signatures skipped as pkg skips them, with the reason.
    pub skipped: Vec<String>,
}

/// A `signature` action, read.
#[derive(Debug)]
pub struct SignatureAction<'a> {
    action: &'a Action,
    algorithm: String,
    /// `rsa` signed (`Some`) or a bare digest (`None`); `None` with `hash` `None` too when
    /// the algorithm is unknown.
    signed: Option<bool>,
    hash: Option<Sha2>,
    value: Vec<u8>,
    version: Option<u32>,
}

impl<'a> SignatureAction<'a> {
    /// Reads the attributes pkg reads (`algorithm`, `value`, `version`, the certificate hash).
    pub fn parse(action: &'a Action) -> Result<Self, SignatureError> {
        let bad = |message: String| SignatureError::Malformed { message };
        if action.kind() != ActionKind::Signature {
            return Err(bad(format!(
                "a {} action is not a signature",
                action.kind()
            )));
        }
        let algorithm = action
            .get("algorithm")
            .ok_or_else(|| bad("no algorithm attribute".into()))?
            .to_owned();
        let (signed, hash) = match algorithm.split_once('-') {
            Some(("rsa", h)) => (Some(true), Sha2::from_name(h)),
            None => (Some(false), Sha2::from_name(&algorithm)),
            Some(_) => (None, None),
        };
        let (signed, hash) = if hash.is_none() {
            (None, None)
        } else {
            (signed, hash)
        };
        let raw = action.get("value").unwrap_or("");
        let value = hex::decode(raw).map_err(|_| bad(format!("value {raw:?} is not hex")))?;
        let version = match action.get("version") {
            None => Some(0),
            Some(v) => Some(
                v.parse::<u32>()
                    .map_err(|_| bad(format!("version {v:?} is not a number")))?,
            ),
        };
        if signed == Some(true) && action.hash().is_none() {
            return Err(bad(format!(
                "algorithm {algorithm} names no certificate (no payload hash)"
            )));
        }
        Ok(SignatureAction {
            action,
            algorithm,
            signed,
            hash,
            value,
            version,
        })
    }

    /// The SHA-1 of the signing certificate's PEM file, for signatures made with a key.
    pub fn certificate(&self) -> Option<&str> {
        self.action.hash()
    }

    /// Why pkg would skip this signature, if it would.
    fn skip_reason(&self) -> Option<String> {
        if self
            .action
            .attrs()
            .keys()
            .any(|k| k.starts_with("variant."))
        {
            return Some("tagged with a variant".into());
        }
        if self.version != Some(0) {
            return Some(format!("version {:?} is newer than 0", self.version));
        }
        if self.hash.is_none() {
            return Some(format!("unknown algorithm {:?}", self.algorithm));
        }
        if self.signed == Some(false) && self.action.hash().is_some() {
            return Some(format!(
                "algorithm {} names a certificate but no key algorithm",
                self.algorithm
            ));
        }
        None
    }

    /// The certificates of `chain`, as actions the repository can fetch as payloads
    /// (hash, compressed hash, sizes).
    fn chain_actions(&self) -> Result<Vec<Action>, SignatureError> {
        let list = |k: &str| -> Vec<&str> {
            self.action
                .get(k)
                .map(|v| v.split_whitespace().collect())
                .unwrap_or_default()
        };
        let chain = list("chain");
        let per_cert = [
            ("chain.sizes", "pkg.size", None),
            ("chain.csizes", "pkg.csize", None),
            ("chain.chashes", "chash", None),
            (
                "pkg.chain.sha512t_256",
                "pkg.content-hash",
                Some("file:sha512t_256:"),
            ),
            (
                "pkg.chain.chashes.sha512t_256",
                "pkg.content-hash",
                Some("gzip:sha512t_256:"),
            ),
        ];
        let mut out = Vec::new();
        for (i, hash) in chain.iter().enumerate() {
            let mut a = Action::new(ActionKind::Signature);
            a.set_hash(Some((*hash).to_owned()));
            a.set("value", "chain");
            for (from, to, prefix) in per_cert {
                let vals = list(from);
                if vals.is_empty() {
                    continue;
                }
                let v = vals.get(i).ok_or_else(|| SignatureError::Malformed {
                    message: format!(
                        "{from} has {} value(s) for {} chain certificate(s)",
                        vals.len(),
                        chain.len()
                    ),
                })?;
                a.push(to, &format!("{}{v}", prefix.unwrap_or("")));
            }
            out.push(a);
        }
        Ok(out)
    }
}

/// pkg's quoting for signed text (`Action.sig_str`).
fn sig_value(out: &mut String, v: &str) {
    if v.is_empty() || v.contains([' ', '\'', '"']) || v.contains("$(") {
        if !v.contains('"') {
            out.push('"');
            out.push_str(v);
            out.push('"');
        } else if !v.contains('\'') {
            out.push('\'');
            out.push_str(v);
            out.push('\'');
        } else {
            out.push('"');
            out.push_str(&v.replace('"', "\\\""));
            out.push('"');
        }
    } else {
        out.push_str(v);
    }
}

/// One action as pkg writes it for signing.
fn sig_line(action: &Action, signature: bool) -> String {
    let mut out = action.kind().name().to_owned();
    if let Some(h) = action.hash() {
        out.push(' ');
        out.push_str(h);
    }
    let mut attrs = action.attrs().clone();
    if signature {
        // The value cannot sign itself; pkg's constructor adds the version.
        attrs.insert("value".into(), vec![String::new()]);
        attrs
            .entry("version".into())
            .or_insert_with(|| vec!["0".into()]);
    }
    // pkg's manifest loader turns these legacy spellings into the current ones first.
    if let Some(z) = attrs.get("opensolaris.zone").cloned() {
        attrs.entry("variant.opensolaris.zone".into()).or_insert(z);
    }
    if action.kind() == ActionKind::Set
        && attrs
            .get("name")
            .is_some_and(|n| n.len() == 1 && n[0] == "authority")
    {
        attrs.insert("name".into(), vec!["publisher".into()]);
    }
    for (k, vals) in &attrs {
        let mut vals: Vec<&String> = vals.iter().collect();
        vals.sort();
        for v in vals {
            out.push(' ');
            out.push_str(k);
            out.push('=');
            sig_value(&mut out, v);
        }
    }
    out
}

/// The exact text `signature` signs in `manifest` (see the module docs).
pub fn signed_message(manifest: &Manifest, signature: &Action) -> String {
    let mut lines: Vec<String> = manifest
        .actions()
        .iter()
        .filter_map(|a| match a.kind() {
            ActionKind::Signature if a == signature => Some(sig_line(a, true)),
            ActionKind::Signature => None,
            _ => Some(sig_line(a, false)),
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

/// Fetches a certificate payload (a `signature` action naming it by hash, compressed hash and
/// sizes) from the package's repository, verified against those hashes.
pub type CertFetch<'f> =
    dyn FnMut(&Action) -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>> + 'f;

/// Checks `manifest`'s signatures under `policy` (see the module docs), fetching certificates
/// with `fetch`. `anchors` may be `None` only under [`SignaturePolicy::Ignore`], or when the
/// manifest holds no signature made with a key.
pub fn verify_manifest(
    manifest: &Manifest,
    policy: SignaturePolicy,
    anchors: Option<&TrustAnchors>,
    fetch: &mut CertFetch<'_>,
) -> Result<SignatureReport, SignatureError> {
    let mut report = SignatureReport::default();
    if policy == SignaturePolicy::Ignore {
        return Ok(report);
    }
    let empty = TrustAnchors::default();
    let anchors = anchors.unwrap_or(&empty);
    for action in manifest.by_kind(ActionKind::Signature) {
        let sig = SignatureAction::parse(action)?;
        if let Some(reason) = sig.skip_reason() {
            report.skipped.push(reason);
            continue;
        }
        let hash = sig.hash.expect("skipped without a hash");
        let message = signed_message(manifest, action);
        let Some(cert_hash) = sig.certificate() else {
            if hash.digest(message.as_bytes()) != sig.value {
                return Err(SignatureError::Mismatch {
                    subject: "digest".into(),
                    algorithm: sig.algorithm,
                });
            }
            report.digests += 1;
            continue;
        };
        let leaf = fetch_cert(fetch, action, cert_hash)?;
        let mut chain = Vec::new();
        for c in sig.chain_actions()? {
            let h = c.hash().expect("chain actions have a hash").to_owned();
            chain.push(fetch_cert(fetch, &c, &h)?);
        }
        anchors.verify_chain(&leaf, &chain)?;
        if !leaf.verifies(hash, message.as_bytes(), &sig.value)? {
            return Err(SignatureError::Mismatch {
                subject: leaf.name().to_owned(),
                algorithm: sig.algorithm,
            });
        }
        report.signed_by.push(leaf.name().to_owned());
    }
    if policy == SignaturePolicy::RequireSignatures && report.signed_by.is_empty() {
        let mut why = Vec::new();
        if report.digests > 0 {
            why.push(format!("{} unsigned digest(s) only", report.digests));
        }
        why.extend(
            report
                .skipped
                .iter()
                .map(|s| format!("a signature skipped: {s}")),
        );
        return Err(SignatureError::Unsigned {
            reason: if why.is_empty() {
                "no signature action".into()
            } else {
                why.join("; ")
            },
        });
    }
    Ok(report)
}

/// Fetches and parses one certificate.
fn fetch_cert(
    fetch: &mut CertFetch<'_>,
    action: &Action,
    hash: &str,
) -> Result<Cert, SignatureError> {
    let pem = fetch(action).map_err(|source| SignatureError::Fetch {
        hash: hash.to_owned(),
        source,
    })?;
    let mut certs = Cert::from_pem_all(&pem, &format!("certificate {hash}"))?;
    if certs.len() != 1 {
        return Err(SignatureError::BadCertificate {
            what: format!("certificate {hash}"),
            message: format!("{} certificates in one file, pkg reads one", certs.len()),
        });
    }
    Ok(certs.remove(0))
}

#[cfg(test)]
mod tests;
