//! Conditions on what a `signed` rule's verified attestations say: the packages an SPDX SBOM
//! lists (`deny_packages`, in pkg(5) terms) and the builder and source of a SLSA v1
//! provenance (`slsa_builder_id`, `slsa_source_digest`). Only predicates signed by one of the
//! rule's keys are read.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;
use validator::{PackageMatch, PackageQuery, SpdxPackage};

use super::DenyReason;
use crate::intoto::{PREDICATE_SLSA_V1, PREDICATE_SPDX};
use crate::keys::KeyId;

/// A verified attestation's predicate, as the policy reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedPredicate {
    /// The key whose signature over the statement verified.
    pub key: KeyId,
    /// The statement's predicate type URI.
    pub predicate_type: String,
    /// The predicate.
    pub predicate: Value,
}

/// A digest in an in-toto digest set: algorithm (`sha1`, `sha256`, `gitCommit`, …) and
/// lower-case hex.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SourceDigest {
    /// The digest-set key.
    pub algorithm: String,
    /// Lower-case hex.
    pub hex: String,
}

impl SourceDigest {
    /// Parses `ALGORITHM:HEX` (`sha1:…`, `sha256:…`, `gitCommit:…`); the error says what
    /// is wrong.
    pub fn parse(s: &str) -> Result<SourceDigest, String> {
        let Some((alg, hex)) = s.split_once(':') else {
            return Err(format!(
                "{s:?} is not ALGORITHM:HEX (like \"sha1:0123…\" or \"sha256:0123…\")"
            ));
        };
        if alg.is_empty() || !alg.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(format!(
                "{s:?}: the algorithm {alg:?} is not a digest-set key such as sha1, sha256 or gitCommit"
            ));
        }
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("{s:?}: {hex:?} is not hexadecimal"));
        }
        let want = match alg {
            "sha1" | "gitCommit" => Some(40),
            "sha256" => Some(64),
            "sha512" => Some(128),
            _ => None,
        };
        if let Some(n) = want
            && hex.len() != n
        {
            return Err(format!(
                "{s:?}: a {alg} digest has {n} hex digits, this one {}",
                hex.len()
            ));
        }
        Ok(SourceDigest {
            algorithm: alg.to_owned(),
            hex: hex.to_ascii_lowercase(),
        })
    }
}

impl fmt::Display for SourceDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm, self.hex)
    }
}

/// A rule's content conditions, checked at load.
#[derive(Debug, Clone, Default)]
pub struct ContentConditions {
    /// Packages the SBOM must not list.
    pub deny_packages: Vec<PackageQuery>,
    /// The SLSA provenance's `runDetails.builder.id` must be this.
    pub slsa_builder_id: Option<String>,
    /// One of the provenance's `buildDefinition.resolvedDependencies` must have this digest.
    pub slsa_source_digest: Option<SourceDigest>,
}

/// A package an SBOM lists, as refusals name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedPackage {
    /// The name (stem), such as `library/security/openssl`.
    pub name: String,
    /// The version as the SBOM gives it.
    pub version: Option<String>,
    /// The FMRI, when the SBOM gives one.
    pub fmri: Option<String>,
    /// The publisher (the supplier organization, else the FMRI's); `None` when the SBOM
    /// names none (no supplier, `NOASSERTION`, an FMRI without one).
    pub publisher: Option<String>,
}

impl ListedPackage {
    pub(super) fn of(p: &SpdxPackage) -> Self {
        ListedPackage {
            name: p.name.clone(),
            version: p.version.clone(),
            fmri: p.fmri.clone(),
            publisher: validator::package_publisher(p).map(str::to_owned),
        }
    }

    /// Why a `deny_packages` entry scoped to a publisher (`pattern`, as written) matched a
    /// package whose publisher is unknown: such an entry fails closed, and the refusal says
    /// so (empty when the entry has no publisher or the package has one).
    pub(super) fn unknown_publisher_note(&self, pattern: &str) -> &'static str {
        if self.publisher.is_none() && pattern.trim_start().starts_with("pkg://") {
            "; its publisher is unknown (the SBOM names no supplier), and an entry scoped to a publisher refuses a package of unknown publisher"
        } else {
            ""
        }
    }
}

impl fmt::Display for ListedPackage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = if self.name.is_empty() {
            "a package without a name"
        } else {
            &self.name
        };
        match &self.version {
            Some(v) => write!(f, "{name}@{v}")?,
            None => write!(f, "{name}")?,
        }
        match &self.fmri {
            Some(fmri) => write!(f, " ({fmri})"),
            None => write!(f, " (pkg:/{})", self.name),
        }
    }
}

impl ContentConditions {
    /// Whether the rule has any condition.
    pub fn is_empty(&self) -> bool {
        self.deny_packages.is_empty()
            && self.slsa_builder_id.is_none()
            && self.slsa_source_digest.is_none()
    }

    /// The first condition the predicates by `rule_keys` fail, if any.
    pub(super) fn check(
        &self,
        predicates: &[VerifiedPredicate],
        rule_keys: &BTreeSet<&KeyId>,
    ) -> Option<DenyReason> {
        let by_rule = |uri: &'static str| {
            predicates
                .iter()
                .filter(move |p| p.predicate_type == uri && rule_keys.contains(&p.key))
                .map(|p| &p.predicate)
        };
        if !self.deny_packages.is_empty() {
            let sboms: Vec<&Value> = by_rule(PREDICATE_SPDX).collect();
            if sboms.is_empty() {
                return Some(DenyReason::MissingSbom {
                    deny_packages: self.deny_packages.iter().map(|q| q.to_string()).collect(),
                });
            }
            for sbom in sboms {
                if let Some(d) = self.check_sbom(sbom) {
                    return Some(d);
                }
            }
        }
        if self.slsa_builder_id.is_some() || self.slsa_source_digest.is_some() {
            let provenances: Vec<&Value> = by_rule(PREDICATE_SLSA_V1).collect();
            if provenances.is_empty() {
                return Some(DenyReason::MissingProvenance {
                    conditions: self.slsa_conditions(),
                });
            }
            return self.check_provenances(&provenances);
        }
        None
    }

    /// The SLSA conditions as written in the policy (`slsa_builder_id = "…"`).
    fn slsa_conditions(&self) -> Vec<String> {
        let mut c = Vec::new();
        if let Some(b) = &self.slsa_builder_id {
            c.push(format!("slsa_builder_id = \"{b}\""));
        }
        if let Some(d) = &self.slsa_source_digest {
            c.push(format!("slsa_source_digest = \"{d}\""));
        }
        c
    }

    fn check_sbom(&self, sbom: &Value) -> Option<DenyReason> {
        let bytes = serde_json::to_vec(sbom).expect("a JSON value serializes");
        let doc = match validator::parse_spdx(&bytes) {
            Ok(d) => d,
            Err(error) => return Some(DenyReason::UnreadableSbom { error }),
        };
        for p in &doc.packages {
            for q in &self.deny_packages {
                match q.matches_package(p) {
                    PackageMatch::No => {}
                    PackageMatch::Yes => {
                        return Some(DenyReason::DeniedPackage {
                            package: ListedPackage::of(p),
                            pattern: q.to_string(),
                        });
                    }
                    PackageMatch::VersionUnknown => {
                        return Some(DenyReason::PackageVersionUnknown {
                            package: ListedPackage::of(p),
                            pattern: q.to_string(),
                        });
                    }
                }
            }
        }
        None
    }

    /// Admits when one provenance satisfies every SLSA condition; otherwise names what the
    /// closest ones say (the builders, or the sources of those with the right builder).
    fn check_provenances(&self, provenances: &[&Value]) -> Option<DenyReason> {
        let builder_ok = |p: &Value| {
            self.slsa_builder_id
                .as_deref()
                .is_none_or(|want| builder_id(p) == Some(want))
        };
        let right_builder: Vec<&Value> = provenances
            .iter()
            .copied()
            .filter(|p| builder_ok(p))
            .collect();
        if right_builder.is_empty() {
            let found = provenances
                .iter()
                .map(|p| builder_id(p).unwrap_or("no builder id").to_owned())
                .collect::<BTreeSet<_>>();
            return Some(DenyReason::SlsaBuilderMismatch {
                want: self.slsa_builder_id.clone().unwrap_or_default(),
                found: found.into_iter().collect(),
            });
        }
        let Some(want) = &self.slsa_source_digest else {
            return None;
        };
        if right_builder
            .iter()
            .any(|p| source_digests(p).any(|d| d == *want))
        {
            return None;
        }
        let found = right_builder
            .iter()
            .flat_map(|p| source_digests(p))
            .map(|d| d.to_string())
            .collect::<BTreeSet<_>>();
        Some(DenyReason::SlsaSourceMismatch {
            want: want.to_string(),
            found: found.into_iter().collect(),
        })
    }
}

/// `runDetails.builder.id` of a SLSA v1 provenance.
fn builder_id(p: &Value) -> Option<&str> {
    p.pointer("/runDetails/builder/id").and_then(Value::as_str)
}

/// Every digest of `buildDefinition.resolvedDependencies`.
fn source_digests(p: &Value) -> impl Iterator<Item = SourceDigest> + '_ {
    p.pointer("/buildDefinition/resolvedDependencies")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|d| d.get("digest").and_then(Value::as_object))
        .flatten()
        .filter_map(|(alg, hex)| {
            hex.as_str().map(|h| SourceDigest {
                algorithm: alg.clone(),
                hex: h.to_ascii_lowercase(),
            })
        })
}
