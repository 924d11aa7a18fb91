//! The manifests cosign keeps at `sha256-<hex>.sig` and `.att`: one layer per signature or
//! attestation, oldest first, the signature in the layer's annotations, and a config blob
//! that only records the layers (an image config with one `diff_ids` entry and one
//! `history` entry per layer, at the zero time).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use validator::Digest;

use super::{
    ARTIFACT_SIG_CONFIG_MEDIA_TYPE, MAX_LAYERS, OCI_CONFIG_MEDIA_TYPE, OCI_MANIFEST_MEDIA_TYPE,
    SIGNATURE_ANNOTATION, SignatureError,
};

/// A blob reference: what a caller needs to fetch and check one blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobDescriptor {
    /// The blob's media type.
    #[serde(rename = "mediaType")]
    pub media_type: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its digest.
    pub digest: Digest,
}

/// One layer of a signature or attestation manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureLayer {
    /// The payload blob (simple-signing JSON or DSSE envelope).
    pub payload: BlobDescriptor,
    /// `dev.cosignproject.cosign/signature` (empty on attestation layers).
    pub signature_b64: String,
    /// All the layer's annotations, the signature's included.
    pub annotations: BTreeMap<String, String>,
}

impl SignatureLayer {
    /// The layer's annotations other than the signature.
    fn other_annotations(&self) -> BTreeMap<&str, &str> {
        self.annotations
            .iter()
            .filter(|(k, _)| k.as_str() != SIGNATURE_ANNOTATION)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

/// A manifest ready to push, with the config blob it names. The caller uploads the new
/// payload blob, the config blob, then the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedManifest {
    /// The manifest JSON.
    pub manifest: Vec<u8>,
    /// Its digest.
    pub manifest_digest: Digest,
    /// The config blob JSON.
    pub config: Vec<u8>,
    /// Its digest.
    pub config_digest: Digest,
    /// The layers in manifest order.
    pub layers: Vec<SignatureLayer>,
    /// False when the new layer was a duplicate of one already there (nothing to push
    /// beyond what is already in the registry).
    pub layer_added: bool,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestWire {
    schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media_type: Option<String>,
    config: DescWire,
    #[serde(default)]
    layers: Vec<DescWire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    subject: Option<DescWire>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescWire {
    media_type: String,
    size: u64,
    digest: Digest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Serialize)]
struct ConfigWire {
    architecture: &'static str,
    created: &'static str,
    history: Vec<HistoryWire>,
    os: &'static str,
    rootfs: RootfsWire,
    config: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct HistoryWire {
    created: &'static str,
}

#[derive(Serialize)]
struct RootfsWire {
    #[serde(rename = "type")]
    kind: &'static str,
    diff_ids: Vec<Digest>,
}

/// Go's zero `time.Time`, which cosign's config carries unless told to record a time.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Reads the layers of a signature or attestation manifest (all of them, whatever their
/// media type). More than [`MAX_LAYERS`] layers is refused, as cosign does.
pub fn parse_layers(manifest: &[u8]) -> Result<Vec<SignatureLayer>, SignatureError> {
    let wire: ManifestWire =
        serde_json::from_slice(manifest).map_err(|e| SignatureError::Malformed {
            what: "signature manifest".to_owned(),
            detail: e.to_string(),
        })?;
    if wire.layers.len() > MAX_LAYERS {
        return Err(SignatureError::Malformed {
            what: "signature manifest".to_owned(),
            detail: format!(
                "{} layers, more than the {MAX_LAYERS} cosign accepts",
                wire.layers.len()
            ),
        });
    }
    Ok(wire
        .layers
        .into_iter()
        .map(|l| {
            let annotations = l.annotations.unwrap_or_default();
            SignatureLayer {
                signature_b64: annotations
                    .get(SIGNATURE_ANNOTATION)
                    .cloned()
                    .unwrap_or_default(),
                payload: BlobDescriptor {
                    media_type: l.media_type,
                    size: l.size,
                    digest: l.digest,
                },
                annotations,
            }
        })
        .collect())
}

/// How a new layer joins the existing ones.
pub(crate) enum Join<'a> {
    /// Append at the end unless `is_duplicate` says an existing layer already holds it.
    Append {
        is_duplicate: &'a dyn Fn(&SignatureLayer) -> bool,
    },
    /// Put the new layer first and drop existing layers `drop` selects (`--replace`).
    ReplaceFirst {
        drop: &'a dyn Fn(&SignatureLayer) -> bool,
    },
}

/// Builds the layer list from an existing manifest and a new layer.
pub(crate) fn join_layers(
    existing: Option<&[u8]>,
    new: SignatureLayer,
    join: Join<'_>,
) -> Result<(Vec<SignatureLayer>, bool), SignatureError> {
    let mut layers = match existing {
        Some(bytes) => parse_layers(bytes)?,
        None => Vec::new(),
    };
    match join {
        Join::Append { is_duplicate } => {
            let dup = layers.iter().any(|l| {
                l.payload.digest == new.payload.digest
                    && l.payload.media_type == new.payload.media_type
                    && l.other_annotations() == new.other_annotations()
                    && is_duplicate(l)
            });
            if dup {
                return Ok((layers, false));
            }
            layers.push(new);
        }
        Join::ReplaceFirst { drop } => {
            layers.retain(|l| !drop(l));
            layers.insert(0, new);
        }
    }
    if layers.len() > MAX_LAYERS {
        return Err(SignatureError::Malformed {
            what: "signature manifest".to_owned(),
            detail: format!("adding a layer would pass the {MAX_LAYERS}-layer limit"),
        });
    }
    Ok((layers, true))
}

/// Serializes the manifest and config for `layers`. `subject` makes it an OCI 1.1 referrer
/// (config media type `application/vnd.dev.cosign.artifact.sig.v1+json`, as cosign's
/// `--registry-referrers-mode oci-1-1` does; registries derive `artifactType` from it).
pub(crate) fn build(
    layers: Vec<SignatureLayer>,
    subject: Option<&BlobDescriptor>,
    layer_added: bool,
) -> AttachedManifest {
    let config = ConfigWire {
        architecture: "",
        created: ZERO_TIME,
        history: layers
            .iter()
            .map(|_| HistoryWire { created: ZERO_TIME })
            .collect(),
        os: "",
        rootfs: RootfsWire {
            kind: "layers",
            diff_ids: layers.iter().map(|l| l.payload.digest.clone()).collect(),
        },
        config: BTreeMap::new(),
    };
    let config = serde_json::to_vec(&config).expect("the config serializes");
    let config_digest = Digest::sha256(&config);
    let wire = ManifestWire {
        schema_version: 2,
        media_type: Some(OCI_MANIFEST_MEDIA_TYPE.to_owned()),
        config: DescWire {
            media_type: if subject.is_some() {
                ARTIFACT_SIG_CONFIG_MEDIA_TYPE
            } else {
                OCI_CONFIG_MEDIA_TYPE
            }
            .to_owned(),
            size: config.len() as u64,
            digest: config_digest.clone(),
            annotations: None,
        },
        layers: layers
            .iter()
            .map(|l| DescWire {
                media_type: l.payload.media_type.clone(),
                size: l.payload.size,
                digest: l.payload.digest.clone(),
                annotations: Some(l.annotations.clone()),
            })
            .collect(),
        annotations: None,
        subject: subject.map(|s| DescWire {
            media_type: s.media_type.clone(),
            size: s.size,
            digest: s.digest.clone(),
            annotations: None,
        }),
    };
    let manifest = serde_json::to_vec(&wire).expect("the manifest serializes");
    AttachedManifest {
        manifest_digest: Digest::sha256(&manifest),
        manifest,
        config,
        config_digest,
        layers,
        layer_added,
    }
}
