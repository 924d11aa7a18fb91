//! Admission policy: which images a worker may run, and what evidence they need.
//!
//! A policy file is TOML:
//!
//! ```toml
//! # What happens to an image no rule matches: "reject" (the default) or "accept".
//! default = "reject"
//!
//! [[rule]]
//! match = "registry.example.com/prod/**"
//! action = "signed"
//! keys = ["keys/release.pub", "keys/ci.pub"]    # relative to this file
//! threshold = 2                                  # default 1, at most the number of keys
//! require_attestations = ["spdxjson", "slsaprovenance1"]
//! require_digest_pin = true
//! # What the attestations signed by the rule's keys must say:
//! deny_packages = ["openssl@<3.0", "pkg://openindiana.org/library/security/*@<1.2"]
//! slsa_builder_id = "https://ci.example/builder"
//! slsa_source_digest = "sha1:0123456789abcdef0123456789abcdef01234567"
//!
//! [[rule]]
//! match = "registry.example.com/dev/*"
//! action = "accept"
//! ```
//!
//! Rules are tried in order and the first whose `match` pattern matches the image's
//! repository (the reference without tag and digest) decides; see the glob rules below.
//! Without a policy file everything is accepted ([`Policy::accept_all`]); with one, an image
//! no rule matches gets `default`, which is `reject` ("no rule matches").
//!
//! Patterns: a segment `**` matches zero or more whole path segments; elsewhere `*` matches
//! any characters within one segment (never a `/`). `registry.example.com/prod/*` matches
//! `registry.example.com/prod/app` but not `registry.example.com/prod/team/app`.
//!
//! Names and patterns are compared in one canonical spelling ([`validator::RegistryHost`]):
//! the host lower case, without a trailing `.` and without a default port (`:443`, `:80`),
//! Docker Hub as `docker.io` with `library/` before a one-component name. So a rule written
//! `LOCALHOST:5000/app*` is the rule `localhost:5000/app*`, and `REG.example:443/prod/x`
//! cannot dodge a rule for `reg.example/prod/**`. A pattern that could match no canonical
//! name (an invalid host, upper case in the repository path, a trailing `/`, a glob host
//! with a default port) is refused at load.
//!
//! Content conditions read the predicates of verified attestations by the rule's keys
//! ([`Evidence::predicates`]): `deny_packages` refuses an image whose SPDX SBOM lists a
//! package matching one of its [`validator::PackageQuery`] patterns (`NAME[@OP VERSION]`,
//! the package search's syntax and pkg(5) version order; NAME also as `pkg:/NAME` or
//! `pkg://PUBLISHER/NAME`), and refuses one without such an SBOM; `slsa_builder_id` and
//! `slsa_source_digest` need one SLSA v1 provenance whose `runDetails.builder.id` is the
//! builder and one of whose `buildDefinition.resolvedDependencies` has the digest. See
//! [`ContentConditions`].
//!
//! The policy is pure: the caller asks [`Policy::keys_for`] which keys to verify with,
//! verifies signatures and attestations (see [`crate::cosign`], [`crate::attestation`]),
//! and hands the result to [`Policy::evaluate`] as [`Evidence`].

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::glob;
use crate::intoto::predicate_type_uri;

mod content;
use crate::keys::{KeyError, KeyId, VerifyingKey};
pub use content::{ContentConditions, ListedPackage, SourceDigest, VerifiedPredicate};

/// A policy file could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The file could not be read.
    #[error("{}: cannot read the policy", path.display())]
    Read {
        /// The policy file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The TOML does not parse or does not have the policy's shape.
    #[error("{}{}: {}", path.display(), error.line.map(|l| format!(":{l}")).unwrap_or_default(), match &error.key {
        Some(k) => format!("{k}: {}", error.message),
        None => error.message.clone(),
    })]
    Parse {
        /// The policy file.
        path: PathBuf,
        /// Line, dotted key and message.
        error: config_toml::TomlError,
    },
    /// A value is out of range or inconsistent.
    #[error("{}{}: {field}: {reason}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Value {
        /// The policy file.
        path: PathBuf,
        /// The line, when found.
        line: Option<usize>,
        /// The dotted key (`rule.0.threshold`).
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A key file named by the policy could not be read.
    #[error("{}{}: {field}: cannot read key file {}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default(), key_path.display())]
    KeyFile {
        /// The policy file.
        path: PathBuf,
        /// The line, when found.
        line: Option<usize>,
        /// The dotted key (`rule.0.keys.1`).
        field: String,
        /// The key file.
        key_path: PathBuf,
        /// The cause (I/O or key format).
        #[source]
        source: Box<KeyFileError>,
    },
}

/// Why a key file named by a policy could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    /// It could not be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// It is not a P-256 public key PEM.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// What a rule does with the images it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Admit (subject to `require_digest_pin`).
    Accept,
    /// Refuse.
    Reject,
    /// Admit when signed by `threshold` of `keys` and carrying the required attestations.
    Signed,
}

/// What happens when no rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DefaultAction {
    /// Admit.
    Accept,
    /// Refuse with [`DenyReason::NoRuleMatches`].
    Reject,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePolicy {
    default: Option<DefaultAction>,
    #[serde(default)]
    rule: Vec<FileRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRule {
    #[serde(rename = "match")]
    pattern: String,
    action: Action,
    #[serde(default)]
    keys: Vec<PathBuf>,
    threshold: Option<usize>,
    #[serde(default)]
    require_attestations: Vec<String>,
    #[serde(default)]
    require_digest_pin: bool,
    #[serde(default)]
    deny_packages: Vec<String>,
    slsa_builder_id: Option<String>,
    slsa_source_digest: Option<String>,
}

const HINTS: config_toml::Hints<'static> = &[
    ("default", "\"accept\" or \"reject\""),
    (
        "threshold",
        "how many of the keys must have signed, a whole number such as 1",
    ),
    ("require_digest_pin", "true or false"),
    (
        "deny_packages",
        "a list of packages such as [\"openssl@<3.0\", \"pkg:/library/security/*\"]",
    ),
    (
        "slsa_builder_id",
        "the builder's id URI, a string such as \"https://ci.example/builder\"",
    ),
    (
        "slsa_source_digest",
        "a string ALGORITHM:HEX such as \"sha1:0123…\"",
    ),
];

/// One checked rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// 0-based position in the file.
    pub index: usize,
    /// The `match` pattern as written (decisions name the rule by it).
    pub pattern: String,
    /// The pattern in the canonical spelling names are matched in
    /// ([`validator::canonical_name`]): what the rule actually matches.
    canonical: String,
    /// The action.
    pub action: Action,
    /// The keys (for `signed`).
    pub keys: Vec<VerifyingKey>,
    /// How many distinct keys must have signed.
    pub threshold: usize,
    /// Required predicate type URIs (short names resolved at load).
    pub require_attestations: Vec<String>,
    /// The same types as written in the file (`spdxjson`), for messages.
    pub require_attestation_names: Vec<String>,
    /// What the attestations by the rule's keys must say.
    pub content: ContentConditions,
    /// The reference must name a digest.
    pub require_digest_pin: bool,
}

/// A rule as decisions name it: its position and pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRef {
    /// 0-based position in the file.
    pub index: usize,
    /// Its `match` pattern.
    pub pattern: String,
}

impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule {} (match = \"{}\")", self.index + 1, self.pattern)
    }
}

/// The verified facts about one image the caller gathered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    /// Keys whose signatures on the image verified.
    pub signatures: Vec<KeyId>,
    /// Verified attestations: (signing key, predicate type URI).
    pub attestations: Vec<(KeyId, String)>,
    /// The predicates of verified attestations, for a rule's content conditions.
    pub predicates: Vec<VerifiedPredicate>,
}

/// An attestation type a rule requires: its name as the policy writes it and its URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttestationType {
    /// As written in `require_attestations` (`spdxjson`, or a URI).
    pub name: String,
    /// The predicate type URI.
    pub uri: String,
}

impl fmt::Display for AttestationType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.name == self.uri {
            f.write_str(&self.uri)
        } else {
            write!(f, "{} ({})", self.name, self.uri)
        }
    }
}

/// Why an image is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DenyReason {
    /// The matching rule rejects it.
    RejectedByRule,
    /// A policy file exists and no rule matches.
    NoRuleMatches,
    /// The rule requires a digest reference and the reference is by tag.
    NotPinned,
    /// No verified signature at all.
    Unsigned,
    /// Signed, but by none of the rule's keys.
    UnknownKey {
        /// The keys that did sign.
        signed_by: Vec<KeyId>,
    },
    /// Fewer of the rule's keys signed than its threshold.
    ThresholdNotMet {
        /// Distinct rule keys that signed.
        have: usize,
        /// The threshold.
        need: usize,
        /// The number of keys in the rule.
        of: usize,
        /// Which of the rule's keys signed.
        signed_by: Vec<KeyId>,
    },
    /// No attestation of these required types by one of the rule's keys.
    MissingAttestation {
        /// Every required type missing, in the rule's order.
        missing: Vec<AttestationType>,
    },
    /// `deny_packages` is set and no SPDX SBOM attestation by the rule's keys verified.
    MissingSbom {
        /// The rule's `deny_packages`, as written.
        deny_packages: Vec<String>,
    },
    /// A verified SBOM attestation is not an SPDX document the policy can read.
    UnreadableSbom {
        /// Why it cannot be read.
        error: String,
    },
    /// The SBOM lists a package `deny_packages` refuses.
    DeniedPackage {
        /// The package as the SBOM lists it.
        package: ListedPackage,
        /// The `deny_packages` entry, as written.
        pattern: String,
    },
    /// The SBOM lists a package a `deny_packages` entry names, at a version that is not a
    /// pkg(5) version (or none), so its constraint cannot be decided.
    PackageVersionUnknown {
        /// The package as the SBOM lists it.
        package: ListedPackage,
        /// The `deny_packages` entry, as written.
        pattern: String,
    },
    /// SLSA conditions are set and no SLSA v1 provenance by the rule's keys verified.
    MissingProvenance {
        /// The rule's SLSA conditions, as written (`slsa_builder_id = "…"`).
        conditions: Vec<String>,
    },
    /// No verified provenance names the builder `slsa_builder_id` requires.
    SlsaBuilderMismatch {
        /// The required builder id.
        want: String,
        /// The builder ids the provenances name.
        found: Vec<String>,
    },
    /// No verified provenance by the required builder has a resolved dependency with the
    /// digest `slsa_source_digest` requires.
    SlsaSourceMismatch {
        /// The required digest (`sha1:…`).
        want: String,
        /// The digests those provenances list.
        found: Vec<String>,
    },
}

impl DenyReason {
    /// A stable snake_case name of the reason for JSON and metrics (`denied_package`); the
    /// words for people are its `Display`.
    pub fn code(&self) -> &'static str {
        match self {
            DenyReason::RejectedByRule => "rejected_by_rule",
            DenyReason::NoRuleMatches => "no_rule_matches",
            DenyReason::NotPinned => "not_pinned",
            DenyReason::Unsigned => "unsigned",
            DenyReason::UnknownKey { .. } => "unknown_key",
            DenyReason::ThresholdNotMet { .. } => "threshold",
            DenyReason::MissingAttestation { .. } => "missing_attestation",
            DenyReason::MissingSbom { .. } => "missing_sbom",
            DenyReason::UnreadableSbom { .. } => "unreadable_sbom",
            DenyReason::DeniedPackage { .. } => "denied_package",
            DenyReason::PackageVersionUnknown { .. } => "package_version_unknown",
            DenyReason::MissingProvenance { .. } => "missing_provenance",
            DenyReason::SlsaBuilderMismatch { .. } => "slsa_builder_mismatch",
            DenyReason::SlsaSourceMismatch { .. } => "slsa_source_mismatch",
        }
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids = |ks: &[KeyId]| {
            ks.iter()
                .map(|k| k.short().to_owned())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            DenyReason::RejectedByRule => f.write_str("rejected by rule"),
            DenyReason::NoRuleMatches => f.write_str("no rule matches"),
            DenyReason::NotPinned => f.write_str("not pinned by digest"),
            DenyReason::Unsigned => f.write_str("unsigned"),
            DenyReason::UnknownKey { signed_by } => {
                write!(f, "signed by unknown key(s) {}", ids(signed_by))
            }
            DenyReason::ThresholdNotMet {
                have,
                need,
                of,
                signed_by,
            } => {
                write!(f, "signed by {have} of {of} keys, {need} needed")?;
                if !signed_by.is_empty() {
                    write!(f, " (signed by {})", ids(signed_by))?;
                }
                Ok(())
            }
            DenyReason::MissingAttestation { missing } => {
                let s = if missing.len() == 1 { "" } else { "s" };
                let list = missing
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ");
                write!(f, "missing attestation{s} {list}")
            }
            DenyReason::MissingSbom { deny_packages } => write!(
                f,
                "no verified SPDX SBOM attestation ({}) by the rule's keys, which deny_packages {} needs",
                crate::intoto::PREDICATE_SPDX,
                quoted(deny_packages)
            ),
            DenyReason::UnreadableSbom { error } => write!(
                f,
                "the SPDX SBOM attestation cannot be read, so deny_packages cannot be checked: {error}"
            ),
            DenyReason::DeniedPackage { package, pattern } => write!(
                f,
                "the SBOM lists {package}, refused by deny_packages \"{pattern}\"{}",
                package.unknown_publisher_note(pattern)
            ),
            DenyReason::PackageVersionUnknown { package, pattern } => write!(
                f,
                "the SBOM lists {package} without a pkg(5) version, so deny_packages \"{pattern}\" cannot clear it{}",
                package.unknown_publisher_note(pattern)
            ),
            DenyReason::MissingProvenance { conditions } => write!(
                f,
                "no verified SLSA v1 provenance ({}) by the rule's keys, which {} needs",
                crate::intoto::PREDICATE_SLSA_V1,
                conditions.join(" and ")
            ),
            DenyReason::SlsaBuilderMismatch { want, found } => write!(
                f,
                "the SLSA provenance names builder {}, refused by slsa_builder_id = \"{want}\"",
                quoted(found)
            ),
            DenyReason::SlsaSourceMismatch { want, found } => {
                write!(
                    f,
                    "no resolved dependency of the SLSA provenance has digest {want}, required by slsa_source_digest"
                )?;
                if found.is_empty() {
                    f.write_str(" (it lists no digests)")
                } else {
                    write!(f, " (it lists {})", found.join(", "))
                }
            }
        }
    }
}

/// `"a", "b"`.
fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("\"{i}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The outcome of [`Policy::evaluate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The image may run.
    Admit {
        /// The rule that admitted it (`None`: no policy, or `default = "accept"`).
        rule: Option<RuleRef>,
        /// The rule's keys that signed it.
        keys: Vec<KeyId>,
        /// The required attestations found.
        attestations: Vec<String>,
    },
    /// The image may not run.
    Deny {
        /// The rule that refused it (`None`: no rule matched).
        rule: Option<RuleRef>,
        /// Why.
        reason: DenyReason,
    },
}

impl Decision {
    /// True for [`Decision::Admit`].
    pub fn is_admit(&self) -> bool {
        matches!(self, Decision::Admit { .. })
    }
}

/// A loaded, checked policy.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Vec<Rule>,
    default: DefaultAction,
}

impl Policy {
    /// The policy in force when there is no policy file: everything is accepted.
    pub fn accept_all() -> Self {
        Policy {
            rules: Vec::new(),
            default: DefaultAction::Accept,
        }
    }

    /// Loads a policy file; key paths are relative to its directory.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::from_toml(&text, path, &mut |p| {
            let full = base.join(p);
            let bytes = std::fs::read(&full)?;
            Ok(VerifyingKey::from_pem(&bytes, &full.display().to_string())?)
        })
    }

    /// Parses policy text; `path` names the file in errors and `read_key` loads a key named
    /// in the file (as written there).
    pub fn from_toml(
        text: &str,
        path: &Path,
        read_key: &mut dyn FnMut(&Path) -> Result<VerifyingKey, KeyFileError>,
    ) -> Result<Self, PolicyError> {
        let file: FilePolicy =
            config_toml::from_str(text, HINTS).map_err(|error| PolicyError::Parse {
                path: path.to_owned(),
                error,
            })?;
        let value = |field: String, reason: String| PolicyError::Value {
            path: path.to_owned(),
            line: config_toml::line_of(text, &field),
            field,
            reason,
        };
        let mut rules = Vec::with_capacity(file.rule.len());
        for (i, r) in file.rule.into_iter().enumerate() {
            if r.pattern.is_empty() {
                return Err(value(format!("rule.{i}.match"), "must not be empty".into()));
            }
            if r.action != Action::Signed {
                for (set, name) in [
                    (!r.keys.is_empty(), "keys"),
                    (r.threshold.is_some(), "threshold"),
                    (!r.require_attestations.is_empty(), "require_attestations"),
                    (!r.deny_packages.is_empty(), "deny_packages"),
                    (r.slsa_builder_id.is_some(), "slsa_builder_id"),
                    (r.slsa_source_digest.is_some(), "slsa_source_digest"),
                ] {
                    if set {
                        return Err(value(
                            format!("rule.{i}.{name}"),
                            "only applies to action = \"signed\"".into(),
                        ));
                    }
                }
            }
            let mut keys = Vec::with_capacity(r.keys.len());
            let mut seen = BTreeSet::new();
            for (j, kp) in r.keys.iter().enumerate() {
                let field = format!("rule.{i}.keys.{j}");
                let key = read_key(kp).map_err(|source| PolicyError::KeyFile {
                    path: path.to_owned(),
                    line: config_toml::line_of(text, &field),
                    field: field.clone(),
                    key_path: kp.clone(),
                    source: Box::new(source),
                })?;
                if !seen.insert(key.key_id().clone()) {
                    return Err(value(
                        field,
                        format!("key {} is listed twice", kp.display()),
                    ));
                }
                keys.push(key);
            }
            let threshold = r.threshold.unwrap_or(1);
            if r.action == Action::Signed {
                if keys.is_empty() {
                    return Err(value(
                        format!("rule.{i}.keys"),
                        "action = \"signed\" needs at least one key".into(),
                    ));
                }
                if threshold == 0 || threshold > keys.len() {
                    return Err(value(
                        format!("rule.{i}.threshold"),
                        format!("must be between 1 and the number of keys ({})", keys.len()),
                    ));
                }
            }
            let mut attestations = Vec::with_capacity(r.require_attestations.len());
            for (j, a) in r.require_attestations.iter().enumerate() {
                let uri = predicate_type_uri(a).ok_or_else(|| {
                    value(
                        format!("rule.{i}.require_attestations.{j}"),
                        format!("unknown attestation type \"{a}\"; use a cosign --type name (spdxjson, slsaprovenance1, …) or a predicate type URI"),
                    )
                })?;
                attestations.push(uri.to_owned());
            }
            let mut content = ContentConditions::default();
            for (j, d) in r.deny_packages.iter().enumerate() {
                let q = validator::PackageQuery::parse(d)
                    .map_err(|e| value(format!("rule.{i}.deny_packages.{j}"), e))?;
                content.deny_packages.push(q);
            }
            if let Some(b) = &r.slsa_builder_id {
                if b.trim().is_empty() || b.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(value(
                        format!("rule.{i}.slsa_builder_id"),
                        format!(
                            "{b:?} is not a builder id: give the URI the provenance's runDetails.builder.id holds (like \"https://ci.example/builder\")"
                        ),
                    ));
                }
                content.slsa_builder_id = Some(b.clone());
            }
            if let Some(d) = &r.slsa_source_digest {
                content.slsa_source_digest = Some(
                    SourceDigest::parse(d)
                        .map_err(|e| value(format!("rule.{i}.slsa_source_digest"), e))?,
                );
            }
            let canonical = glob::canonical_pattern(&r.pattern)
                .map_err(|reason| value(format!("rule.{i}.match"), reason))?;
            rules.push(Rule {
                index: i,
                canonical,
                pattern: r.pattern,
                action: r.action,
                keys,
                threshold,
                require_attestations: attestations,
                require_attestation_names: r.require_attestations,
                content,
                require_digest_pin: r.require_digest_pin,
            });
        }
        Ok(Policy {
            rules,
            default: file.default.unwrap_or(DefaultAction::Reject),
        })
    }

    /// The rules in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The first rule matching `reference` (tag and digest are ignored). The reference is
    /// matched in its canonical spelling ([`validator::canonical_name`]), as the patterns
    /// are, so `LOCALHOST:5000/app` and `localhost:5000/app` select the same rule.
    pub fn rule_for(&self, reference: &str) -> Option<&Rule> {
        let name = validator::canonical_name(reference);
        let repo = glob::repository(&name);
        self.rules
            .iter()
            .find(|r| glob::matches(&r.canonical, repo))
    }

    /// The keys to verify `reference`'s signatures and attestations with (empty when the
    /// deciding rule is not `signed`).
    pub fn keys_for(&self, reference: &str) -> &[VerifyingKey] {
        self.rule_for(reference).map_or(&[], |r| &r.keys)
    }

    /// Decides on `reference` given whether it names a digest and the verified evidence.
    pub fn evaluate(
        &self,
        reference: &str,
        pinned_by_digest: bool,
        evidence: &Evidence,
    ) -> Decision {
        let Some(rule) = self.rule_for(reference) else {
            return match self.default {
                DefaultAction::Accept => Decision::Admit {
                    rule: None,
                    keys: Vec::new(),
                    attestations: Vec::new(),
                },
                DefaultAction::Reject => Decision::Deny {
                    rule: None,
                    reason: DenyReason::NoRuleMatches,
                },
            };
        };
        let rref = RuleRef {
            index: rule.index,
            pattern: rule.pattern.clone(),
        };
        let deny = |reason| Decision::Deny {
            rule: Some(rref.clone()),
            reason,
        };
        if rule.action == Action::Reject {
            return deny(DenyReason::RejectedByRule);
        }
        if rule.require_digest_pin && !pinned_by_digest {
            return deny(DenyReason::NotPinned);
        }
        if rule.action == Action::Accept {
            return Decision::Admit {
                rule: Some(rref),
                keys: Vec::new(),
                attestations: Vec::new(),
            };
        }
        let rule_ids: BTreeSet<&KeyId> = rule.keys.iter().map(|k| k.key_id()).collect();
        if evidence.signatures.is_empty() {
            return deny(DenyReason::Unsigned);
        }
        let signed: BTreeSet<&KeyId> = evidence
            .signatures
            .iter()
            .filter(|k| rule_ids.contains(k))
            .collect();
        if signed.is_empty() {
            let others: BTreeSet<&KeyId> = evidence.signatures.iter().collect();
            return deny(DenyReason::UnknownKey {
                signed_by: others.into_iter().cloned().collect(),
            });
        }
        let signed_by: Vec<KeyId> = signed.into_iter().cloned().collect();
        if signed_by.len() < rule.threshold {
            return deny(DenyReason::ThresholdNotMet {
                have: signed_by.len(),
                need: rule.threshold,
                of: rule.keys.len(),
                signed_by,
            });
        }
        let missing: Vec<AttestationType> = rule
            .require_attestations
            .iter()
            .zip(&rule.require_attestation_names)
            .filter(|(required, _)| {
                !evidence
                    .attestations
                    .iter()
                    .any(|(k, t)| t == *required && rule_ids.contains(k))
            })
            .map(|(uri, name)| AttestationType {
                name: name.clone(),
                uri: uri.clone(),
            })
            .collect();
        if !missing.is_empty() {
            return deny(DenyReason::MissingAttestation { missing });
        }
        if let Some(reason) = rule.content.check(&evidence.predicates, &rule_ids) {
            return deny(reason);
        }
        Decision::Admit {
            rule: Some(rref),
            keys: signed_by,
            attestations: rule.require_attestations.clone(),
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod content_tests;
