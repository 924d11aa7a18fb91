//! Docker schema 2 documents rewritten with OCI media types for a layout destination, as
//! `skopeo copy` does when it writes `oci:DIR:TAG`: skopeo's `oci:` transport (and umoci)
//! find a tag only among `index.json` entries of OCI manifests and indexes, so a Docker
//! manifest written as it is cannot be read there by tag.
//!
//! A manifest keeps its config and layers byte for byte and changes only media types (the
//! manifest's, its config's, its layers'); a manifest list becomes an OCI index whose entries
//! name the converted manifests. Every rewritten document has a new digest, so the copy
//! reports each one ([`Converted`]); referrers and cosign tags name the Docker digests and
//! do not apply to the new ones.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::Value;
use validator::{Digest, MediaType};

use super::Node;
use crate::image::{Content, TransferError, checked};

/// A document the copy rewrote with OCI media types: the source's, and what was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    /// The Docker manifest or manifest list at the source.
    pub from: Content,
    /// The OCI manifest or index written instead.
    pub to: Content,
}

/// Rewrites `order` (children first) in place: each Docker manifest and manifest list with
/// OCI media types, and each index whose entries named a rewritten child. Returns what
/// changed, children first; nothing when every document is OCI already.
pub(super) fn to_oci(order: &mut [Node]) -> Result<Vec<Converted>, TransferError> {
    let mut done: HashMap<Digest, Content> = HashMap::new();
    let mut out = Vec::new();
    for node in order.iter_mut() {
        let broken = |what: String| TransferError::BrokenSource {
            what: format!("{} cannot be converted to OCI: {what}", node.content.digest),
        };
        let mut doc: Value =
            serde_json::from_slice(&node.bytes).map_err(|e| broken(e.to_string()))?;
        let mut changed = swap(doc.get_mut("mediaType"));
        changed |= swap(doc.get_mut("config").and_then(|c| c.get_mut("mediaType")));
        if let Some(layers) = doc.get_mut("layers").and_then(Value::as_array_mut) {
            for l in layers {
                changed |= swap(l.get_mut("mediaType"));
            }
        }
        if let Some(entries) = doc.get_mut("manifests").and_then(Value::as_array_mut) {
            for e in entries {
                let old = e.get("digest").and_then(Value::as_str);
                let Some(new) = old
                    .and_then(|d| Digest::parse(d).ok())
                    .and_then(|d| done.get(&d))
                else {
                    continue;
                };
                e["digest"] = Value::from(new.digest.as_str());
                e["size"] = Value::from(new.size);
                e["mediaType"] = Value::from(new.media_type.as_str());
                changed = true;
            }
        }
        if !changed {
            continue;
        }
        let bytes = Bytes::from(serde_json::to_vec(&doc).map_err(|e| broken(e.to_string()))?);
        let media_type = doc
            .get("mediaType")
            .and_then(Value::as_str)
            .unwrap_or(&node.content.media_type)
            .to_owned();
        let to = Content {
            digest: Digest::sha256(&bytes),
            size: bytes.len() as u64,
            media_type,
        };
        // The rewritten document is checked as every document the copy writes is.
        checked(&to, &bytes)?;
        done.insert(node.content.digest.clone(), to.clone());
        out.push(Converted {
            from: std::mem::replace(&mut node.content, to),
            to: node.content.clone(),
        });
        node.bytes = bytes;
    }
    Ok(out)
}

/// Replaces a Docker media type string with its OCI equivalent; whether it did.
fn swap(field: Option<&mut Value>) -> bool {
    let Some(field) = field else { return false };
    let oci = field
        .as_str()
        .and_then(|s| MediaType::parse(s).ok())
        .and_then(|m| m.oci_equivalent());
    match oci {
        Some(m) => {
            *field = Value::from(m.as_str());
            true
        }
        None => false,
    }
}
