//! Media types of OCI and Docker schema2 documents and layers.

use std::fmt;

/// A media type, parsed once: the known OCI and Docker schema2 types by name, anything else kept
/// as [`MediaType::Other`] after its grammar was checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MediaType {
    /// `application/vnd.oci.image.manifest.v1+json`
    OciManifest,
    /// `application/vnd.oci.image.index.v1+json`
    OciIndex,
    /// `application/vnd.oci.image.config.v1+json`
    OciConfig,
    /// `application/vnd.oci.empty.v1+json`
    OciEmpty,
    /// `application/vnd.oci.image.layer.v1.tar`
    OciLayerTar,
    /// `application/vnd.oci.image.layer.v1.tar+gzip`
    OciLayerGzip,
    /// `application/vnd.oci.image.layer.v1.tar+zstd`
    OciLayerZstd,
    /// `application/vnd.oci.image.layer.nondistributable.v1.tar` (deprecated)
    OciForeignTar,
    /// `application/vnd.oci.image.layer.nondistributable.v1.tar+gzip` (deprecated)
    OciForeignGzip,
    /// `application/vnd.oci.image.layer.nondistributable.v1.tar+zstd` (deprecated)
    OciForeignZstd,
    /// `application/vnd.docker.distribution.manifest.v2+json`
    DockerManifest,
    /// `application/vnd.docker.distribution.manifest.list.v2+json`
    DockerManifestList,
    /// `application/vnd.docker.container.image.v1+json`
    DockerConfig,
    /// `application/vnd.docker.image.rootfs.diff.tar`
    DockerLayerTar,
    /// `application/vnd.docker.image.rootfs.diff.tar.gzip`
    DockerLayerGzip,
    /// `application/vnd.docker.image.rootfs.foreign.diff.tar.gzip`
    DockerForeignGzip,
    /// `application/vnd.docker.distribution.manifest.v1+json` and `+prettyjws` (schema1, refused)
    DockerSchema1,
    /// Any other grammar-valid media type.
    Other(String),
}

/// A layer's compression, as named by its media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Plain tar.
    None,
    /// gzip (one or more members).
    Gzip,
    /// zstd.
    Zstd,
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compression::None => "tar",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        })
    }
}

const TABLE: &[(&str, MediaType)] = &[
    (
        "application/vnd.oci.image.manifest.v1+json",
        MediaType::OciManifest,
    ),
    (
        "application/vnd.oci.image.index.v1+json",
        MediaType::OciIndex,
    ),
    (
        "application/vnd.oci.image.config.v1+json",
        MediaType::OciConfig,
    ),
    ("application/vnd.oci.empty.v1+json", MediaType::OciEmpty),
    (
        "application/vnd.oci.image.layer.v1.tar",
        MediaType::OciLayerTar,
    ),
    (
        "application/vnd.oci.image.layer.v1.tar+gzip",
        MediaType::OciLayerGzip,
    ),
    (
        "application/vnd.oci.image.layer.v1.tar+zstd",
        MediaType::OciLayerZstd,
    ),
    (
        "application/vnd.oci.image.layer.nondistributable.v1.tar",
        MediaType::OciForeignTar,
    ),
    (
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        MediaType::OciForeignGzip,
    ),
    (
        "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
        MediaType::OciForeignZstd,
    ),
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        MediaType::DockerManifest,
    ),
    (
        "application/vnd.docker.distribution.manifest.list.v2+json",
        MediaType::DockerManifestList,
    ),
    (
        "application/vnd.docker.container.image.v1+json",
        MediaType::DockerConfig,
    ),
    (
        "application/vnd.docker.image.rootfs.diff.tar",
        MediaType::DockerLayerTar,
    ),
    (
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
        MediaType::DockerLayerGzip,
    ),
    (
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
        MediaType::DockerForeignGzip,
    ),
    (
        "application/vnd.docker.distribution.manifest.v1+json",
        MediaType::DockerSchema1,
    ),
    (
        "application/vnd.docker.distribution.manifest.v1+prettyjws",
        MediaType::DockerSchema1,
    ),
];

/// A string that is not a media type (RFC 6838 restricted names, as the OCI schema has it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{input:?} is not a media type (expected type/subtype of [A-Za-z0-9!#$&^_.+-], at most 127 each)"
)]
pub struct MediaTypeError {
    /// The offending input.
    pub input: String,
}

fn restricted_name_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 127
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(c))
}

impl MediaType {
    /// Parses a media type, checking the grammar of unknown ones. Parameters (`; charset=…`)
    /// are not part of an OCI media type and are refused.
    pub fn parse(s: &str) -> Result<Self, MediaTypeError> {
        if let Some((_, mt)) = TABLE.iter().find(|(name, _)| *name == s) {
            return Ok(mt.clone());
        }
        match s.split_once('/') {
            Some((t, sub)) if restricted_name_ok(t) && restricted_name_ok(sub) => {
                Ok(MediaType::Other(s.to_owned()))
            }
            _ => Err(MediaTypeError {
                input: s.chars().take(200).collect(),
            }),
        }
    }

    /// The media type as a string.
    pub fn as_str(&self) -> &str {
        if let MediaType::Other(s) = self {
            return s;
        }
        TABLE
            .iter()
            .find(|(_, mt)| mt == self)
            .map(|(name, _)| *name)
            .expect("every named media type is in the table")
    }

    /// The OCI media type a Docker schema 2 one corresponds to (manifest, manifest list,
    /// config, layers; the mapping `skopeo copy` applies when it writes `oci:`); None for
    /// everything else, OCI's own types included.
    pub fn oci_equivalent(&self) -> Option<MediaType> {
        Some(match self {
            MediaType::DockerManifest => MediaType::OciManifest,
            MediaType::DockerManifestList => MediaType::OciIndex,
            MediaType::DockerConfig => MediaType::OciConfig,
            MediaType::DockerLayerTar => MediaType::OciLayerTar,
            MediaType::DockerLayerGzip => MediaType::OciLayerGzip,
            MediaType::DockerForeignGzip => MediaType::OciForeignGzip,
            _ => return None,
        })
    }

    /// Image manifests (OCI or Docker schema2).
    pub fn is_manifest(&self) -> bool {
        matches!(self, MediaType::OciManifest | MediaType::DockerManifest)
    }

    /// Image indexes (OCI or Docker manifest lists).
    pub fn is_index(&self) -> bool {
        matches!(self, MediaType::OciIndex | MediaType::DockerManifestList)
    }

    /// Image configs (OCI or Docker).
    pub fn is_image_config(&self) -> bool {
        matches!(self, MediaType::OciConfig | MediaType::DockerConfig)
    }

    /// Layer media types a runtime can apply, with their compression.
    pub fn layer_compression(&self) -> Option<Compression> {
        use MediaType::*;
        match self {
            OciLayerTar | OciForeignTar | DockerLayerTar => Some(Compression::None),
            OciLayerGzip | OciForeignGzip | DockerLayerGzip | DockerForeignGzip => {
                Some(Compression::Gzip)
            }
            OciLayerZstd | OciForeignZstd => Some(Compression::Zstd),
            _ => None,
        }
    }

    /// Non-distributable ("foreign") layers: deprecated, may carry `urls`.
    pub fn is_non_distributable(&self) -> bool {
        matches!(
            self,
            MediaType::OciForeignTar
                | MediaType::OciForeignGzip
                | MediaType::OciForeignZstd
                | MediaType::DockerForeignGzip
        )
    }
}

impl fmt::Display for MediaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for MediaType {
    type Err = MediaTypeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MediaType::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_types_round_trip() {
        for (name, mt) in TABLE {
            let parsed = MediaType::parse(name).unwrap();
            assert_eq!(&parsed, mt);
            if *mt != MediaType::DockerSchema1 {
                assert_eq!(parsed.as_str(), *name);
            }
        }
    }

    /// Every Docker schema 2 type has its OCI counterpart of the same kind; OCI's own types
    /// and schema 1 have none.
    #[test]
    fn docker_types_map_to_oci_ones_of_the_same_kind() {
        for (name, mt) in TABLE {
            let oci = mt.oci_equivalent();
            if name.starts_with("application/vnd.docker.") && *mt != MediaType::DockerSchema1 {
                let oci = oci.unwrap_or_else(|| panic!("{name} has no OCI type"));
                assert!(oci.as_str().starts_with("application/vnd.oci."), "{name}");
                assert_eq!(oci.is_manifest(), mt.is_manifest(), "{name}");
                assert_eq!(oci.is_index(), mt.is_index(), "{name}");
                assert_eq!(oci.is_image_config(), mt.is_image_config(), "{name}");
                assert_eq!(oci.layer_compression(), mt.layer_compression(), "{name}");
                assert_eq!(
                    oci.is_non_distributable(),
                    mt.is_non_distributable(),
                    "{name}"
                );
            } else {
                assert_eq!(oci, None, "{name}");
            }
        }
    }

    #[test]
    fn grammar() {
        assert_eq!(
            MediaType::parse("application/vnd.example+type").unwrap(),
            MediaType::Other("application/vnd.example+type".into())
        );
        for bad in [
            "",
            "application",
            "application/",
            "/json",
            "application/json; charset=utf-8",
            "application/json/x",
            ".app/json",
            "a\u{e9}/b",
        ] {
            assert!(MediaType::parse(bad).is_err(), "{bad:?}");
        }
        assert!(MediaType::parse(&format!("a/{}", "b".repeat(128))).is_err());
    }

    #[test]
    fn layer_kinds() {
        assert_eq!(
            MediaType::DockerLayerGzip.layer_compression(),
            Some(Compression::Gzip)
        );
        assert_eq!(
            MediaType::OciForeignZstd.layer_compression(),
            Some(Compression::Zstd)
        );
        assert!(MediaType::OciForeignTar.is_non_distributable());
        assert_eq!(MediaType::OciConfig.layer_compression(), None);
    }
}
