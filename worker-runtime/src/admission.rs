//! The admission policy: whether the worker may run the image a reference resolved to.
//!
//! [`check`] runs on the resolved digest twice per replacement: before any layer is fetched
//! and again right before the zone is created or replaced (a signature removed meanwhile
//! refuses). Only a `signed` rule costs network requests ([`fetch_evidence`] with that rule's
//! keys); `accept`, `reject` and "no rule matches" are decided locally.
//!
//! A refusal ([`Denial`]) names the rule, the policy's reason and, when the verified evidence
//! alone does not explain it, what the signatures that did not count were: signed by a key
//! the rule does not list, a signature over another digest (replayed onto this tag), or a
//! tampered payload. [`Admission`] is what the zone's status records when the image is
//! admitted: the rule, the short ids of the keys that signed and the attestations found.

use registry_client::signatures::{Evidence, Rejection, fetch_evidence};
use registry_client::transfer::{ImageRef, TransferError};
use registry_client::{Client, Reference};
use serde::{Deserialize, Serialize};
use trust::policy::Action;
use trust::{Decision, DenyReason, Policy};
use validator::Digest;

use crate::mirrors::Sources;

/// What admitted the image a zone runs (recorded in its status).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    /// The deciding rule (`rule 1 (match = "…")`), or `None`: no policy file, or no rule
    /// matched and `default = "accept"`.
    pub rule: Option<String>,
    /// Short ids (`sha256:` and 12 hex digits) of the rule's keys that signed the image.
    pub keys: Vec<String>,
    /// Predicate type URIs of the required attestations found.
    pub attestations: Vec<String>,
}

impl Admission {
    /// One line for the status table: `rule 2: sha256:abcd… +2 att`, `no policy`.
    pub fn summary(&self) -> String {
        let Some(rule) = &self.rule else {
            return "no rule (default accept)".to_owned();
        };
        let mut s = rule.clone();
        if !self.keys.is_empty() {
            s.push_str(" keys ");
            s.push_str(&self.keys.join(","));
        }
        if !self.attestations.is_empty() {
            s.push_str(&format!(" +{} attestation(s)", self.attestations.len()));
        }
        s
    }
}

/// Why the policy refused an image (recorded in the zone's status as `denial`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("policy refused {reference} ({digest}): {}: {message}", rule.as_deref().unwrap_or("no rule matches"))]
pub struct Denial {
    /// The zone's image reference.
    pub reference: String,
    /// The digest it resolved to.
    pub digest: Digest,
    /// The deciding rule, `None` when no rule matched.
    pub rule: Option<String>,
    /// A stable class for metrics and scripts: `rejected_by_rule`, `no_rule_matches`,
    /// `not_pinned`, `unsigned`, `unknown_key`, `replayed`, `tampered`, `threshold`,
    /// `missing_attestation`, or a content class ([`DenyReason::code`]: `missing_sbom`,
    /// `denied_package`, `missing_provenance`, …).
    pub reason: String,
    /// The reason in words, with the rejected signatures that explain it.
    pub message: String,
}

/// The admission check could not be made or refused the image.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdmissionError {
    /// The policy refused the image.
    #[error(transparent)]
    Denied(Box<Denial>),
    /// Signatures and attestations could not be read (the registry failed; retried later).
    #[error("reading the signatures of {reference} ({digest})")]
    Evidence {
        /// The zone's image reference.
        reference: String,
        /// The digest.
        digest: Digest,
        /// The cause.
        #[source]
        source: Box<TransferError>,
    },
}

/// Checks `digest` (what the origin reference of `sources` resolved to) against `policy`:
/// fetches signatures and attestations only when the deciding rule is `signed`.
///
/// Evidence is read where the image is: from each of the pull's sources in order, mirrors
/// first (a mirror made by `rdctl sync` holds the signatures beside the image), then the
/// origin. Signatures are checked against the rule's keys wherever they were read, so a mirror
/// cannot admit what the keys did not sign. The first source whose evidence admits the image
/// decides; when none does, the origin's refusal is returned (else the last mirror's), and
/// only when no source could be read at all is the image refused for want of evidence
/// ([`AdmissionError::Evidence`], the origin's error). The policy matches the reference as
/// the zone manifest writes it, never the mirror's name.
pub async fn check(
    client: &Client,
    policy: &Policy,
    sources: &Sources,
    digest: &Digest,
) -> Result<Admission, AdmissionError> {
    let reference = sources.origin();
    let name = reference.to_string();
    let rule = match policy.rule_for(&name) {
        Some(rule) if rule.action == Action::Signed => rule,
        _ => return decide(policy, reference, digest, None),
    };
    let mut refused = None;
    let mut failed = None;
    for (_, source) in sources.usable() {
        let image = ImageRef::Registry(source.reference.clone());
        match fetch_evidence(client, &image, digest, &rule.keys).await {
            Ok(evidence) => match decide(policy, reference, digest, Some(&evidence)) {
                Ok(a) => {
                    if source.mirror {
                        tracing::debug!(%reference, mirror = %source.reference, %digest, "admitted on the mirror's signatures");
                    }
                    return Ok(a);
                }
                Err(e) => refused = Some(e),
            },
            Err(e) => {
                if source.mirror {
                    tracing::warn!(%reference, mirror = %source.reference, error = %validator::error_chain(&e), "reading signatures at the mirror failed; trying the next source");
                }
                failed = Some(e);
            }
        }
    }
    match (refused, failed) {
        (Some(denial), _) => Err(denial),
        (None, Some(source)) => Err(AdmissionError::Evidence {
            reference: name,
            digest: digest.clone(),
            source: Box::new(source),
        }),
        (None, None) => unreachable!("the origin is always a source"),
    }
}

/// The decision on gathered evidence (`None`: nothing fetched, the rule needs none).
pub fn decide(
    policy: &Policy,
    reference: &Reference,
    digest: &Digest,
    evidence: Option<&Evidence>,
) -> Result<Admission, AdmissionError> {
    let name = reference.to_string();
    let pinned = reference.digest().is_some();
    let facts = evidence.map(Evidence::policy_evidence).unwrap_or_default();
    match policy.evaluate(&name, pinned, &facts) {
        Decision::Admit {
            rule,
            keys,
            attestations,
        } => Ok(Admission {
            rule: rule.map(|r| r.to_string()),
            keys: keys.iter().map(|k| k.short().to_owned()).collect(),
            attestations,
        }),
        Decision::Deny { rule, reason } => {
            let rejected: Vec<&Rejection> = evidence
                .map(|e| e.rejected.iter().collect())
                .unwrap_or_default();
            // The keys whose evidence would have counted: the deciding rule's.
            let keys: Vec<String> = policy
                .rule_for(&name)
                .map(|r| {
                    r.keys
                        .iter()
                        .map(|k| k.key_id().short().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            let (class, message) = explain(&reason, &rejected, &keys);
            Err(AdmissionError::Denied(Box::new(Denial {
                reference: name,
                digest: digest.clone(),
                rule: rule.map(|r| r.to_string()),
                reason: class.to_owned(),
                message,
            })))
        }
    }
}

fn short(d: &str) -> &str {
    &d[..d.len().min("sha256:".len() + 12)]
}

/// A rejection class in words (the codes stay in JSON, never in messages).
fn rejection_words(reason: &str) -> &'static str {
    match reason {
        "bad_signature" => "not verifying (another key, or changed after signing)",
        "digest_mismatch" => "replayed (about another digest)",
        "payload_tampered" => "tampered",
        "no_signature" => "unsigned",
        "unreadable" => "unreadable",
        _ => "malformed",
    }
}

/// The class and words of a refusal. Evidence is verified with the rule's keys only, so a
/// signature by another key shows up as a `bad_signature` rejection, not as
/// [`DenyReason::UnknownKey`]; the rejections tell "unsigned" from the other cases. A refusal
/// for missing evidence (unsigned, a missing attestation, SBOM or provenance) names the
/// attestations found that did not count and why, and `keys`, the rule's keys, whose
/// evidence would have counted.
fn explain(
    reason: &DenyReason,
    rejected: &[&Rejection],
    keys: &[String],
) -> (&'static str, String) {
    let sigs: Vec<&&Rejection> = rejected.iter().filter(|r| r.kind == "signature").collect();
    let atts: Vec<&&Rejection> = rejected
        .iter()
        .filter(|r| r.kind == "attestation")
        .collect();
    let describe = |r: &Rejection| match r.reason {
        // The rejection's own message names the keys tried and both possible causes.
        "bad_signature" => r.message.clone(),
        "digest_mismatch" => format!(
            "signature over another digest {} (replayed onto this image)",
            r.other_digest.as_deref().unwrap_or("?")
        ),
        "payload_tampered" => format!(
            "tampered payload (signature {}…): {}",
            short(r.layer.as_str()),
            r.message
        ),
        other => format!(
            "{} signature {}…: {}",
            rejection_words(other),
            short(r.layer.as_str()),
            r.message
        ),
    };
    let class_of = |r: &Rejection| match r.reason {
        "bad_signature" => "unknown_key",
        "digest_mismatch" => "replayed",
        "payload_tampered" => "tampered",
        _ => "unsigned",
    };
    let others = || {
        sigs.iter()
            .map(|r| describe(r))
            .collect::<Vec<_>>()
            .join("; ")
    };
    // Attestations found that did not count, and why (another key or a changed payload,
    // another image's, unreadable).
    let not_counted = |mut m: String| {
        if !atts.is_empty() {
            m.push_str("; not counted: ");
            m.push_str(
                &atts
                    .iter()
                    .map(|r| {
                        format!(
                            "{} attestation {}…: {}",
                            rejection_words(r.reason),
                            short(r.layer.as_str()),
                            r.message
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            );
        }
        m
    };
    let would_count = |mut m: String| {
        if !keys.is_empty() {
            m.push_str("; would count: evidence signed by ");
            m.push_str(&keys.join(", "));
        }
        m
    };
    match reason {
        DenyReason::RejectedByRule => ("rejected_by_rule", reason.to_string()),
        DenyReason::NoRuleMatches => ("no_rule_matches", reason.to_string()),
        DenyReason::NotPinned => (
            "not_pinned",
            "not pinned by digest: the rule requires image = \"HOST/REPO@sha256:…\"".to_owned(),
        ),
        DenyReason::Unsigned => match sigs.first() {
            None => (
                "unsigned",
                would_count("unsigned: no signature found".to_owned()),
            ),
            Some(first) => (class_of(first), would_count(others())),
        },
        DenyReason::UnknownKey { .. } => ("unknown_key", reason.to_string()),
        DenyReason::ThresholdNotMet { .. } => {
            let mut m = reason.to_string();
            if !sigs.is_empty() {
                m.push_str("; not counted: ");
                m.push_str(&others());
            }
            ("threshold", m)
        }
        DenyReason::MissingAttestation { .. } => (
            "missing_attestation",
            would_count(not_counted(reason.to_string())),
        ),
        DenyReason::MissingSbom { .. } | DenyReason::MissingProvenance { .. } => {
            (reason.code(), would_count(not_counted(reason.to_string())))
        }
        _ => (reason.code(), reason.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use registry_client::signatures::Origin;
    use std::path::Path;

    fn policy(text: &str) -> Policy {
        Policy::from_toml(text, Path::new("policy.toml"), &mut |_| unreachable!()).unwrap()
    }

    fn rejection(reason: &'static str, other: Option<&str>) -> Rejection {
        let d = Digest::sha256(b"layer");
        Rejection {
            kind: "signature",
            layer: d.clone(),
            origin: Origin {
                found_by: "cosign-tag".into(),
                manifest: d,
                tag: None,
            },
            reason,
            message: "m".into(),
            other_digest: other.map(str::to_owned),
        }
    }

    #[test]
    fn refusals_are_classed_and_explained() {
        let r = Reference::parse("reg.example/prod/app:1").unwrap();
        let d = Digest::sha256(b"image");
        let p = policy(
            "[[rule]]\nmatch = \"reg.example/prod/*\"\naction = \"accept\"\nrequire_digest_pin = true\n\
             [[rule]]\nmatch = \"reg.example/bad/*\"\naction = \"reject\"\n",
        );
        let denial = |r: &Reference, ev: Option<&Evidence>| match decide(&p, r, &d, ev) {
            Err(AdmissionError::Denied(d)) => *d,
            other => panic!("{other:?}"),
        };
        let n = denial(&r, None);
        assert_eq!(n.reason, "not_pinned");
        assert_eq!(
            n.rule.as_deref(),
            Some("rule 1 (match = \"reg.example/prod/*\")")
        );
        assert!(n.to_string().starts_with(&format!(
            "policy refused reg.example/prod/app:1 ({d}): rule 1 (match = \"reg.example/prod/*\"): not pinned"
        )));
        let pinned = r.with_digest(d.clone());
        assert_eq!(
            decide(&p, &pinned, &d, None).unwrap().rule.as_deref(),
            Some("rule 1 (match = \"reg.example/prod/*\")")
        );
        let bad = Reference::parse("reg.example/bad/app:1").unwrap();
        assert_eq!(denial(&bad, None).reason, "rejected_by_rule");
        let other = Reference::parse("reg.example/else/app:1").unwrap();
        let n = denial(&other, None);
        assert_eq!(n.reason, "no_rule_matches");
        assert!(
            n.to_string().contains(": no rule matches: no rule matches"),
            "{n}"
        );

        // Unsigned, told apart by what was rejected.
        for (rej, class, words) in [
            (
                vec![],
                "unsigned",
                "unsigned: no signature found".to_owned(),
            ),
            (
                vec![Rejection {
                    message: trust::SignatureError::BadSignature {
                        layer: Digest::sha256(b"layer"),
                        tried: vec!["sha256:0123456789ab".to_owned()],
                    }
                    .to_string(),
                    ..rejection("bad_signature", None)
                }],
                "unknown_key",
                "does not verify with the key tried (sha256:0123456789ab): signed by another key, or the payload was changed after signing".to_owned(),
            ),
            (
                vec![rejection("digest_mismatch", Some("sha256:0123"))],
                "replayed",
                "signature over another digest sha256:0123".to_owned(),
            ),
            (
                vec![rejection("payload_tampered", None)],
                "tampered",
                "tampered payload".to_owned(),
            ),
        ] {
            let (c, m) = explain(&DenyReason::Unsigned, &rej.iter().collect::<Vec<_>>(), &[]);
            assert_eq!(c, class);
            assert!(m.contains(&words), "{m}");
        }
        assert_eq!(Admission::default().summary(), "no rule (default accept)");
    }

    /// Evidence that did not count is named on every refusal for missing evidence, with why,
    /// and so are the keys whose evidence would have counted.
    #[test]
    fn refusals_for_missing_evidence_name_what_was_found_and_the_keys_that_count() {
        let keys = vec!["sha256:0123456789ab".to_owned()];
        let att = |reason, other| Rejection {
            kind: "attestation",
            ..rejection(reason, other)
        };
        let tampered = att("payload_tampered", None);
        let replayed = att("digest_mismatch", Some("sha256:0123"));
        let stranger = Rejection {
            message: "does not verify with the key tried (sha256:0123456789ab)".to_owned(),
            ..att("bad_signature", None)
        };
        for (reason, class) in [
            (
                DenyReason::MissingSbom {
                    deny_packages: vec!["openssl@<3.0".to_owned()],
                },
                "missing_sbom",
            ),
            (
                DenyReason::MissingProvenance {
                    conditions: vec!["slsa_builder_id = \"https://ci.example\"".to_owned()],
                },
                "missing_provenance",
            ),
            (
                DenyReason::MissingAttestation {
                    missing: vec![trust::policy::AttestationType {
                        name: "spdxjson".to_owned(),
                        uri: "https://spdx.dev/Document".to_owned(),
                    }],
                },
                "missing_attestation",
            ),
        ] {
            let (c, m) = explain(&reason, &[&tampered, &replayed, &stranger], &keys);
            assert_eq!(c, class);
            for part in [
                "not counted: ",
                "tampered attestation",
                "replayed (about another digest) attestation",
                "not verifying (another key, or changed after signing) attestation",
                "does not verify with the key tried (sha256:0123456789ab)",
                "would count: evidence signed by sha256:0123456789ab",
            ] {
                assert!(m.contains(part), "{class}: {part:?} not in {m}");
            }
            // Nothing found: the keys are still named.
            let (_, m) = explain(&reason, &[], &keys);
            assert!(
                !m.contains("not counted")
                    && m.contains("would count: evidence signed by sha256:0123456789ab"),
                "{class}: {m}"
            );
        }
        let (c, m) = explain(&DenyReason::Unsigned, &[], &keys);
        assert_eq!(c, "unsigned");
        assert!(
            m.starts_with("unsigned: no signature found")
                && m.contains("would count: evidence signed by sha256:0123456789ab"),
            "{m}"
        );
    }
}
