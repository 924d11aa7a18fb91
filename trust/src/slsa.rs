//! SLSA provenance v1 predicates for images `rdctl build` makes.
//!
//! The build is described by its build type [`RDCTL_BUILD_TYPE`]; `externalParameters` are
//! the image file and its digest (what a person controls), `resolvedDependencies` the
//! lockfile, the publishers and the packages (as `pkg://publisher/name@version` FMRIs, which
//! are URIs), and the times come from `SOURCE_DATE_EPOCH` so the predicate is reproducible.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use validator::Digest;

/// The build type of `rdctl build` (same `reddwarf.invalid` namespace as the SBOM's
/// `documentNamespace`).
pub const RDCTL_BUILD_TYPE: &str = "https://reddwarf.invalid/rdctl/build/v1";

/// A SLSA v1 provenance predicate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Provenance {
    /// What was built and how.
    pub build_definition: BuildDefinition,
    /// Who built it and when.
    pub run_details: RunDetails,
}

/// `buildDefinition`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildDefinition {
    /// The build template's URI.
    pub build_type: String,
    /// Inputs a person controls.
    pub external_parameters: ExternalParameters,
    /// Inputs the builder sets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub internal_parameters: BTreeMap<String, Value>,
    /// Artifacts the build used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolved_dependencies: Vec<ResourceDescriptor>,
}

/// `buildDefinition.externalParameters` of an `rdctl build`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExternalParameters {
    /// The image file, as given on the command line.
    #[serde(rename = "imageFile")]
    pub image_file: String,
    /// Its digest.
    #[serde(rename = "imageFileDigest")]
    pub image_file_digest: Digest,
}

/// An in-toto ResourceDescriptor (at least one of `uri`, `digest`, `content` is set).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDescriptor {
    /// A name for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where it is or what it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Algorithm → lowercase hex.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub digest: BTreeMap<String, String>,
    /// Its media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

impl ResourceDescriptor {
    /// A named file with its digest (the lockfile).
    pub fn file(name: &str, digest: &Digest) -> Self {
        ResourceDescriptor {
            name: Some(name.to_owned()),
            digest: digest_set(digest),
            ..Default::default()
        }
    }

    /// A publisher's origin (`uri` is its repository URL).
    pub fn publisher(name: &str, uri: &str) -> Self {
        ResourceDescriptor {
            name: Some(name.to_owned()),
            uri: Some(uri.to_owned()),
            ..Default::default()
        }
    }

    /// A package by FMRI (`pkg://publisher/name@version`), with the manifest digest when known.
    pub fn package(fmri: &str, manifest_digest: Option<&Digest>) -> Self {
        ResourceDescriptor {
            uri: Some(fmri.to_owned()),
            digest: manifest_digest.map(digest_set).unwrap_or_default(),
            ..Default::default()
        }
    }
}

fn digest_set(d: &Digest) -> BTreeMap<String, String> {
    BTreeMap::from([(d.algorithm().to_string(), d.encoded().to_owned())])
}

/// `runDetails`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDetails {
    /// The build platform.
    pub builder: Builder,
    /// When and which run.
    #[serde(default)]
    pub metadata: BuildMetadata,
}

/// `runDetails.builder`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Builder {
    /// The builder's identity URI.
    pub id: String,
    /// Component versions (`rdctl` → its version).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub version: BTreeMap<String, String>,
}

/// `runDetails.metadata`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildMetadata {
    /// An opaque run id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_id: Option<String>,
    /// RFC 3339 UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_on: Option<String>,
    /// RFC 3339 UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_on: Option<String>,
}

/// The inputs of [`Provenance::for_rdctl_build`].
#[derive(Debug, Clone)]
pub struct RdctlBuild<'a> {
    /// The image file path as given.
    pub image_file: &'a str,
    /// Its digest.
    pub image_file_digest: &'a Digest,
    /// The lockfile name and digest.
    pub lockfile: Option<(&'a str, &'a Digest)>,
    /// Publisher name and origin URI pairs.
    pub publishers: &'a [(&'a str, &'a str)],
    /// Package FMRIs and their manifest digests.
    pub packages: &'a [(&'a str, Option<&'a Digest>)],
    /// The builder's id URI.
    pub builder_id: &'a str,
    /// `rdctl`'s version.
    pub rdctl_version: &'a str,
    /// `SOURCE_DATE_EPOCH`: both `startedOn` and `finishedOn`, so the bytes are reproducible.
    pub source_date_epoch: Option<u64>,
    /// An opaque run id (left out of reproducible builds).
    pub invocation_id: Option<&'a str>,
}

impl Provenance {
    /// The provenance of one `rdctl build`.
    pub fn for_rdctl_build(b: &RdctlBuild<'_>) -> Self {
        let mut deps = Vec::new();
        if let Some((name, digest)) = b.lockfile {
            deps.push(ResourceDescriptor::file(name, digest));
        }
        deps.extend(
            b.publishers
                .iter()
                .map(|(n, u)| ResourceDescriptor::publisher(n, u)),
        );
        deps.extend(
            b.packages
                .iter()
                .map(|(f, d)| ResourceDescriptor::package(f, *d)),
        );
        let time = b.source_date_epoch.map(validator::rfc3339);
        Provenance {
            build_definition: BuildDefinition {
                build_type: RDCTL_BUILD_TYPE.to_owned(),
                external_parameters: ExternalParameters {
                    image_file: b.image_file.to_owned(),
                    image_file_digest: b.image_file_digest.clone(),
                },
                internal_parameters: BTreeMap::new(),
                resolved_dependencies: deps,
            },
            run_details: RunDetails {
                builder: Builder {
                    id: b.builder_id.to_owned(),
                    version: BTreeMap::from([("rdctl".to_owned(), b.rdctl_version.to_owned())]),
                },
                metadata: BuildMetadata {
                    invocation_id: b.invocation_id.map(str::to_owned),
                    started_on: time.clone(),
                    finished_on: time,
                },
            },
        }
    }

    /// The predicate as a JSON value, for [`crate::intoto::Statement`].
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("the provenance serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdctl_build_provenance() {
        let file = Digest::sha256(b"image.toml");
        let lock = Digest::sha256(b"image.lock");
        let pkg = Digest::sha256(b"manifest");
        let p = Provenance::for_rdctl_build(&RdctlBuild {
            image_file: "image.toml",
            image_file_digest: &file,
            lockfile: Some(("image.lock", &lock)),
            publishers: &[("openindiana.org", "https://pkg.openindiana.org/hipster/")],
            packages: &[(
                "pkg://openindiana.org/shell/bash@5.2,5.11-2024.0.0.0:20240101T000000Z",
                Some(&pkg),
            )],
            builder_id: "https://reddwarf.invalid/rdctl",
            rdctl_version: "0.1.0",
            source_date_epoch: Some(0),
            invocation_id: None,
        });
        let v = p.to_value();
        assert_eq!(v["buildDefinition"]["buildType"], RDCTL_BUILD_TYPE);
        assert_eq!(
            v["buildDefinition"]["externalParameters"]["imageFileDigest"],
            file.as_str()
        );
        assert_eq!(
            v["buildDefinition"]["resolvedDependencies"][0]["digest"]["sha256"],
            lock.encoded()
        );
        assert!(
            v["buildDefinition"]["resolvedDependencies"][2]["uri"]
                .as_str()
                .unwrap()
                .starts_with("pkg://")
        );
        assert_eq!(
            v["runDetails"]["metadata"]["startedOn"],
            "1970-01-01T00:00:00Z"
        );
        assert!(v["runDetails"]["metadata"].get("invocationId").is_none());
        assert_eq!(v["runDetails"]["builder"]["version"]["rdctl"], "0.1.0");
        // cosign requires both top-level keys.
        assert!(v.get("buildDefinition").is_some() && v.get("runDetails").is_some());
        let back: Provenance = serde_json::from_value(v).unwrap();
        assert_eq!(back, p);
    }
}
