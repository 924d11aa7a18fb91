//! Builds OCI images for tests (config, manifest, optional index) from tar layers, and pushes
//! them with the real registry client.

#![allow(dead_code)]

use std::io::Write;

use bytes::Bytes;
use registry_client::{Client, Reference};
use serde_json::json;
use validator::Digest;

pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const GZIP_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// One layer: the uncompressed tar and the gzip blob.
#[derive(Clone)]
pub struct Layer {
    pub tar: Vec<u8>,
    pub blob: Vec<u8>,
}

impl Layer {
    pub fn new(tar: Vec<u8>) -> Layer {
        Layer {
            blob: gzip(&tar),
            tar,
        }
    }
    pub fn digest(&self) -> Digest {
        Digest::sha256(&self.blob)
    }
    pub fn diff_id(&self) -> Digest {
        Digest::sha256(&self.tar)
    }
}

/// An image ready to push.
#[derive(Clone)]
pub struct Image {
    pub layers: Vec<Layer>,
    pub config: Vec<u8>,
    pub manifest: Vec<u8>,
    /// Blobs the manifest names but that are not pushed.
    pub skip_push: Vec<Digest>,
}

pub struct Spec<'a> {
    pub os: &'a str,
    pub os_version: Option<&'a str>,
    pub stop_signal: Option<&'a str>,
    /// Replace the diff_ids (wrong DiffID cases).
    pub diff_ids: Option<Vec<Digest>>,
    /// Added to every layer size in the manifest (wrong size cases).
    pub size_delta: i64,
}

impl Default for Spec<'_> {
    fn default() -> Self {
        Spec {
            os: "illumos",
            os_version: None,
            stop_signal: Some("SIGUSR1"),
            diff_ids: None,
            size_delta: 0,
        }
    }
}

pub fn image(layers: Vec<Layer>, spec: &Spec<'_>) -> Image {
    let diff_ids: Vec<String> = spec
        .diff_ids
        .clone()
        .unwrap_or_else(|| layers.iter().map(Layer::diff_id).collect())
        .iter()
        .map(ToString::to_string)
        .collect();
    let mut config = json!({
        "architecture": "amd64",
        "os": spec.os,
        "config": {
            "Entrypoint": ["/usr/bin/app", "--serve"],
            "Cmd": ["100%", "it's"],
            "Env": ["PATH=/usr/bin:/bin", "GREETING=a&b"],
            "User": "app:staff",
            "WorkingDir": "/srv/app",
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    if let Some(v) = spec.os_version {
        config["os.version"] = json!(v);
    }
    if let Some(s) = spec.stop_signal {
        config["config"]["StopSignal"] = json!(s);
    }
    let config = serde_json::to_vec(&config).unwrap();
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": Digest::sha256(&config).to_string(),
            "size": config.len(),
        },
        "layers": layers.iter().map(|l| json!({
            "mediaType": GZIP_LAYER,
            "digest": l.digest().to_string(),
            "size": (l.blob.len() as i64 + spec.size_delta),
        })).collect::<Vec<_>>(),
    });
    Image {
        layers,
        config,
        manifest: serde_json::to_vec(&manifest).unwrap(),
        skip_push: Vec::new(),
    }
}

impl Image {
    pub fn manifest_digest(&self) -> Digest {
        Digest::sha256(&self.manifest)
    }
    pub fn config_digest(&self) -> Digest {
        Digest::sha256(&self.config)
    }

    /// Pushes blobs and the manifest under `reference`; returns the manifest digest.
    pub async fn push(&self, c: &Client, r: &Reference) -> Digest {
        self.push_blobs(c, r).await;
        c.push_manifest(r, MANIFEST, Bytes::from(self.manifest.clone()))
            .await
            .unwrap()
    }

    pub async fn push_blobs(&self, c: &Client, r: &Reference) {
        let mut blobs = vec![self.config.clone()];
        blobs.extend(self.layers.iter().map(|l| l.blob.clone()));
        for b in blobs {
            let d = Digest::sha256(&b);
            if self.skip_push.contains(&d) {
                continue;
            }
            c.push_blob(r.registry(), r.name(), &d, b.len() as u64, &b[..])
                .await
                .unwrap();
        }
    }
}

/// Pushes images as one index under `reference`, each with its platform.
pub async fn push_index(
    c: &Client,
    r: &Reference,
    entries: &[(&Image, serde_json::Value)],
) -> Digest {
    let mut manifests = Vec::new();
    for (img, platform) in entries {
        img.push_blobs(c, r).await;
        let d = img.manifest_digest();
        c.push_manifest(
            &r.with_digest(d.clone()),
            MANIFEST,
            Bytes::from(img.manifest.clone()),
        )
        .await
        .unwrap();
        manifests.push(json!({
            "mediaType": MANIFEST,
            "digest": d.to_string(),
            "size": img.manifest.len(),
            "platform": platform,
        }));
    }
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": manifests,
    }))
    .unwrap();
    c.push_manifest(r, INDEX, Bytes::from(index)).await.unwrap()
}
