//! `only_signed`: a sync (or a pull-through cache) copies an image only when an admission
//! policy in the worker's format ([`trust::policy`]: rules by repository, `signed` rules with
//! keys, threshold and required attestations) admits the digest it is about to copy.
//!
//! [`check_signed`] is the one check: the deciding rule's keys verify the image's cosign
//! signatures and attestations ([`crate::signatures::fetch_evidence`]: `.sig`/`.att` tags,
//! referrers, cosign v3's sigstore bundles) and [`trust::Policy::evaluate`] decides. A refusal
//! ([`Refusal`]) names the rule, the keys tried and why, with the signatures that did not count
//! (another key, another digest, a changed payload).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use trust::Policy;
use trust::policy::Action;
use validator::Digest;

use crate::signatures::{Evidence, fetch_evidence};
use crate::transfer::{ImageRef, TransferError};
use crate::{Client, Reference};

/// A loaded admission policy and the file it came from.
#[derive(Debug, Clone)]
pub struct SignaturePolicy {
    /// The policy file.
    pub path: PathBuf,
    /// The checked policy.
    pub policy: Arc<Policy>,
}

impl SignaturePolicy {
    /// Loads a policy file in the worker's format (key files relative to it).
    pub fn load(path: &Path) -> Result<SignaturePolicy, trust::PolicyError> {
        Ok(SignaturePolicy {
            path: path.to_owned(),
            policy: Arc::new(Policy::load(path)?),
        })
    }
}

/// Why a policy refused an image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reference} ({digest}) refused by {}: {}: {reason}: {message}{}", policy.display(), rule.as_deref().unwrap_or("no rule matches"), keys_tried(keys))]
pub struct Refusal {
    /// The image as the policy saw it.
    pub reference: String,
    /// The digest checked.
    pub digest: Digest,
    /// The policy file.
    pub policy: PathBuf,
    /// The deciding rule (`rule N (match = "…")`), none when no rule matched.
    pub rule: Option<String>,
    /// The short ids of the keys tried (the deciding rule's).
    pub keys: Vec<String>,
    /// A stable class: `rejected_by_rule`, `no_rule_matches`, `not_pinned`, `unsigned`,
    /// `unknown_key`, `replayed`, `tampered`, `threshold`, `missing_attestation`, `content`.
    pub reason: &'static str,
    /// The reason in words, with the signatures that did not count, each classed in the same
    /// vocabulary as `reason` ([`policy_reason`]).
    pub message: String,
}

fn keys_tried(keys: &[String]) -> String {
    if keys.is_empty() {
        String::new()
    } else {
        format!(" (keys tried: {})", keys.join(", "))
    }
}

/// What admitted an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The deciding rule, none for a default `accept`.
    pub rule: Option<String>,
    /// Short ids of the rule's keys that signed it.
    pub keys: Vec<String>,
}

/// The check could not be made, or refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignedCheckError {
    /// The policy refused the image.
    #[error(transparent)]
    Refused(Box<Refusal>),
    /// The signatures could not be read (the source failed).
    #[error("reading the signatures of {reference} ({digest})")]
    Evidence {
        /// The image.
        reference: String,
        /// The digest.
        digest: Digest,
        /// The cause.
        #[source]
        source: Box<TransferError>,
    },
}

/// Checks the image `digest` in `reference`'s repository against `policy` (see the module
/// docs). `reference` names the repository the policy's rules match; the digest is what will
/// be copied, so the check counts as pinned.
pub async fn check_signed(
    client: &Client,
    policy: &SignaturePolicy,
    reference: &Reference,
    digest: &Digest,
) -> Result<Admitted, SignedCheckError> {
    let name = reference.to_string();
    let rule = policy.policy.rule_for(&name);
    let keys: Vec<String> = rule
        .map(|r| {
            r.keys
                .iter()
                .map(|k| k.key_id().short().to_owned())
                .collect()
        })
        .unwrap_or_default();
    let evidence = match rule {
        Some(rule) if rule.action == Action::Signed => Some(
            fetch_evidence(
                client,
                &ImageRef::Registry(reference.with_digest(digest.clone())),
                digest,
                &rule.keys,
            )
            .await
            .map_err(|source| SignedCheckError::Evidence {
                reference: name.clone(),
                digest: digest.clone(),
                source: Box::new(source),
            })?,
        ),
        _ => None,
    };
    let facts = evidence
        .as_ref()
        .map(Evidence::policy_evidence)
        .unwrap_or_default();
    match policy.policy.evaluate(&name, true, &facts) {
        trust::Decision::Admit { rule, keys, .. } => Ok(Admitted {
            rule: rule.map(|r| r.to_string()),
            keys: keys.iter().map(|k| k.short().to_owned()).collect(),
        }),
        trust::Decision::Deny { rule, reason } => {
            let (class, message) = explain(&reason, evidence.as_ref());
            Err(SignedCheckError::Refused(Box::new(Refusal {
                reference: name,
                digest: digest.clone(),
                policy: policy.path.clone(),
                rule: rule.map(|r| r.to_string()),
                keys,
                reason: class,
                message,
            })))
        }
    }
}

/// The admission vocabulary (the one `rdctl sync --json`, the `[[sync]]` status, the proxy
/// and the docs use) for a signature checker's rejection class
/// ([`crate::signatures::Rejection::reason`]): `bad_signature` is `unknown_key`,
/// `digest_mismatch` is `replayed`, `payload_tampered` is `tampered`, `no_signature` is
/// `unsigned`; `malformed` and `unreadable` have no other name and stay as they are.
pub fn policy_reason(signature_reason: &'static str) -> &'static str {
    match signature_reason {
        "bad_signature" => "unknown_key",
        "digest_mismatch" => "replayed",
        "payload_tampered" => "tampered",
        "no_signature" => "unsigned",
        other => other,
    }
}

/// The class and words of a refusal: the policy's reason, and for an unsigned verdict the
/// signatures found that did not verify with the rule's keys, classed as the refusal is.
fn explain(reason: &trust::DenyReason, evidence: Option<&Evidence>) -> (&'static str, String) {
    use trust::DenyReason as R;
    let rejected: Vec<String> = evidence
        .map(|e| {
            e.rejected
                .iter()
                .map(|r| {
                    format!(
                        "{} {} ({}): {}",
                        r.kind,
                        r.layer,
                        policy_reason(r.reason),
                        r.message
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let class = match reason {
        R::RejectedByRule => "rejected_by_rule",
        R::NoRuleMatches => "no_rule_matches",
        R::NotPinned => "not_pinned",
        R::Unsigned => match evidence.and_then(|e| e.rejected_signatures().next()) {
            None => "unsigned",
            Some(r) => match policy_reason(r.reason) {
                c @ ("unknown_key" | "replayed" | "tampered") => c,
                _ => "unsigned",
            },
        },
        R::UnknownKey { .. } => "unknown_key",
        R::ThresholdNotMet { .. } => "threshold",
        R::MissingAttestation { .. } => "missing_attestation",
        _ => "content",
    };
    let mut message = match reason {
        // The class leads the refusal's text already (`…: unsigned: no signature found`).
        R::Unsigned if rejected.is_empty() => "no signature found".to_owned(),
        R::Unsigned => "no signature verifies".to_owned(),
        other => other.to_string(),
    };
    if !rejected.is_empty() {
        message.push_str("; ");
        message.push_str(&rejected.join("; "));
    }
    (class, message)
}
