//! Signatures and attestations on images, at a registry or in an OCI layout alike: the network
//! side of the `trust` crate (which builds and checks the documents, and does no I/O).
//!
//! Where they are kept is where cosign v2 looks:
//!
//! - At a registry, the `sha256-<hex>.sig` and `.att` tags of the image's repository.
//!   [`push_signature`] and [`push_attestation`] read the manifest at the tag, add a layer
//!   through [`trust::cosign::append_signature`] / [`trust::attestation::append_attestation`],
//!   upload the payload and config blobs and PUT the manifest back at the tag (an
//!   unconditional read-modify-write, as cosign's: two signers at the same moment can lose one
//!   signature). A signature can also go out as an OCI 1.1 referrer (cosign's
//!   `--registry-referrers-mode oci-1-1`) when the registry has the referrers API.
//! - In a layout, as `cosign save` writes one for `cosign verify --local-image`: the
//!   manifests in `index.json` tagged `sha256-<hex>.sig` / `.att` with the annotation
//!   `kind: dev.cosignproject.cosign/sigs|atts`, and an untagged entry of the image with
//!   `kind: dev.cosignproject.cosign/image` (cosign takes the first such entry as the image).
//!
//! [`fetch_evidence`] reads all of it back for one digest: the `.sig` and `.att` tags and the
//! referrers (API, tag schema, or a layout's `index.json` entries with that `subject`) whose
//! artifact type is cosign's, fetches every payload (at most [`MAX_PAYLOAD_BYTES`]), verifies
//! each layer, and returns what verified and what did not, with the reason
//! ([`trust::SignatureError`]), so a caller can explain a refusal and build
//! [`trust::policy::Evidence`] ([`Evidence::policy_evidence`]).
//!
//! An admission check (the worker's policy) is: [`resolve`] the reference once (or take the
//! digest it already pinned), `fetch_evidence(client, &image_ref, &digest,
//! policy.keys_for(name))`, then `policy.evaluate(name, pinned, &evidence.policy_evidence())`;
//! [`Evidence::rejected`] says why a signature did not count. Read the image by the same
//! digest afterwards, never by the tag again.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use trust::attestation::{self, VerifiedAttestation};
use trust::cosign::{
    self, ARTIFACT_SIG_CONFIG_MEDIA_TYPE, AttachedManifest, BlobDescriptor,
    OCI_MANIFEST_MEDIA_TYPE, SignatureLayer, VerifiedSignature,
};
use trust::{KeyId, SignatureError, VerifyingKey, bundle};
use validator::{Digest, Tag};

pub use crate::image::cosign::{KIND_ANNOTATION, KIND_ATTS, KIND_IMAGE, KIND_SIGS};
use crate::image::endpoint::{Dest, Source, layout_index, layout_subject, write_cosign_entries};
use crate::image::{Content, ImageRef, TransferError, content_of};
use crate::inspect::read_blob;
use crate::{Client, ReferrersFrom};

/// Largest signature payload or attestation envelope read.
pub const MAX_PAYLOAD_BYTES: u64 = 4 << 20;

/// What a push wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pushed {
    /// The signed image.
    pub subject: Digest,
    /// The tag written (`sha256-<hex>.sig` or `.att`).
    pub tag: String,
    /// The manifest now at the tag.
    pub manifest: Digest,
    /// How many layers it has.
    pub layers: usize,
    /// False when the same signature by the same key was already there.
    pub layer_added: bool,
    /// The referrer pushed by digest (registries with the referrers API, when asked).
    pub referrer: Option<Digest>,
}

/// Resolves `r` to the manifest or index it names (a tag is read once; everything after is by
/// digest). In a layout without a tag, the one image (signature and attestation entries and
/// referrers aside).
pub async fn resolve(client: &Client, r: &ImageRef) -> Result<Content, TransferError> {
    let source = Source::open(client, r)?;
    let (c, _) = source.root(r).await?;
    Ok(c)
}

/// The repository name a signature payload or statement names for `r`: `HOST/REPO` at a
/// registry (cosign's `docker-reference`); for a layout `name` if given, else the directory.
pub fn docker_reference(r: &ImageRef) -> String {
    match r {
        ImageRef::Registry(r) => format!("{}/{}", r.registry(), r.name()),
        ImageRef::Layout(l) => l.dir.display().to_string(),
    }
}

fn trust_err(what: String) -> impl FnOnce(SignatureError) -> TransferError {
    move |source| TransferError::Trust { what, source }
}

/// Adds a signature of `subject` (the simple-signing `payload` and its base64 signature by
/// `signer`) to the image's `sha256-<hex>.sig` manifest at `target`'s repository or layout.
/// With `also_referrer`, a registry that has the referrers API also gets the signature set as
/// a referrer of `subject` (pushed by digest).
pub async fn push_signature(
    client: &Client,
    target: &ImageRef,
    subject: &Content,
    payload: &[u8],
    signature_b64: &str,
    signer: &VerifyingKey,
    also_referrer: bool,
) -> Result<Pushed, TransferError> {
    let tag = cosign::signature_tag(&subject.digest);
    let store = Store::open(client, target)?;
    let existing = store.tagged(&tag).await?;
    let m = cosign::append_signature(existing.as_deref(), payload, signature_b64, signer)
        .map_err(trust_err(format!("existing {tag}")))?;
    store.put_blob(payload).await?;
    store.put_attached(&m, &tag, KIND_SIGS, subject).await?;
    let mut referrer = None;
    if also_referrer && store.has_referrers_api(&subject.digest).await? {
        let desc = BlobDescriptor {
            media_type: subject.media_type.clone(),
            size: subject.size,
            digest: subject.digest.clone(),
        };
        let r = cosign::append_signature_referrer(
            existing.as_deref(),
            payload,
            signature_b64,
            signer,
            &desc,
        )
        .map_err(trust_err(format!("existing {tag}")))?;
        store.put_referrer(&r).await?;
        referrer = Some(r.manifest_digest);
    }
    Ok(Pushed {
        subject: subject.digest.clone(),
        tag,
        manifest: m.manifest_digest,
        layers: m.layers.len(),
        layer_added: m.layer_added,
        referrer,
    })
}

/// Adds an attestation (a DSSE `envelope` of an in-toto statement of `predicate_type`) to the
/// image's `sha256-<hex>.att` manifest; with `replace`, attestations of the same predicate type
/// are dropped (`cosign attest --replace`).
pub async fn push_attestation(
    client: &Client,
    target: &ImageRef,
    subject: &Content,
    envelope: &[u8],
    predicate_type: &str,
    replace: bool,
) -> Result<Pushed, TransferError> {
    let tag = cosign::attestation_tag(&subject.digest);
    let store = Store::open(client, target)?;
    let existing = store.tagged(&tag).await?;
    let m = attestation::append_attestation(existing.as_deref(), envelope, predicate_type, replace)
        .map_err(trust_err(format!("existing {tag}")))?;
    store.put_blob(envelope).await?;
    store.put_attached(&m, &tag, KIND_ATTS, subject).await?;
    Ok(Pushed {
        subject: subject.digest.clone(),
        tag,
        manifest: m.manifest_digest,
        layers: m.layers.len(),
        layer_added: m.layer_added,
        referrer: None,
    })
}

/// Pushes a sigstore bundle (from [`trust::bundle::sign_bundle`]) about `subject` as cosign v3
/// does: the bundle blob, the empty config and a referrer manifest by digest. At a registry
/// without the referrers API the client keeps the `sha256-<hex>` tag-schema index; in a
/// layout the referrer is an untagged `index.json` entry. `created` is the
/// `org.opencontainers.image.created` annotation (RFC 3339), when given.
pub async fn push_bundle(
    client: &Client,
    target: &ImageRef,
    subject: &Content,
    bundle_json: &[u8],
    predicate_type: &str,
    created: Option<&str>,
) -> Result<Pushed, TransferError> {
    let store = Store::open(client, target)?;
    let desc = BlobDescriptor {
        media_type: subject.media_type.clone(),
        size: subject.size,
        digest: subject.digest.clone(),
    };
    let m = bundle::bundle_referrer(bundle_json, predicate_type, &desc, created);
    store.put_blob(bundle_json).await?;
    store.put_referrer(&m).await?;
    Ok(Pushed {
        subject: subject.digest.clone(),
        tag: String::new(),
        manifest: m.manifest_digest.clone(),
        layers: 1,
        layer_added: true,
        referrer: Some(m.manifest_digest),
    })
}

/// Where a layer was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Origin {
    /// `cosign-tag`, `referrers-api`, `referrers-tag` or `layout`.
    pub found_by: String,
    /// The manifest holding the layer.
    pub manifest: Digest,
    /// The tag, for cosign's tags.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// A signature that verified.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GoodSignature {
    /// The key that verified it.
    pub key_id: KeyId,
    /// The payload's `docker-reference`.
    pub docker_reference: String,
    /// The signed digest (the one asked about).
    pub digest: Digest,
    /// The payload's `optional` annotations.
    pub annotations: BTreeMap<String, Value>,
    /// The payload layer.
    pub layer: Digest,
    /// Where it was found.
    pub origin: Origin,
}

/// An attestation that verified.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GoodAttestation {
    /// The key that verified it.
    pub key_id: KeyId,
    /// The signed statement's predicate type.
    pub predicate_type: String,
    /// The envelope layer.
    pub layer: Digest,
    /// Where it was found.
    pub origin: Origin,
    /// The predicate.
    #[serde(skip)]
    pub predicate: Value,
}

/// A layer that did not verify, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejection {
    /// `signature` or `attestation`.
    pub kind: &'static str,
    /// The payload or envelope layer.
    pub layer: Digest,
    /// Where it was found.
    pub origin: Origin,
    /// The reason, a [`SignatureError`] class: `bad_signature` (no given key verifies it),
    /// `digest_mismatch` (about another image), `payload_tampered`, `no_signature`,
    /// `malformed`, `unreadable`.
    pub reason: &'static str,
    /// The message.
    pub message: String,
    /// For `digest_mismatch`, the digest the payload names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_digest: Option<String>,
}

/// What [`fetch_evidence`] found for one digest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// The digest asked about.
    pub subject: Digest,
    /// Signatures that verified (one per layer and key).
    pub signatures: Vec<GoodSignature>,
    /// Attestations that verified.
    pub attestations: Vec<GoodAttestation>,
    /// Layers that did not verify.
    pub rejected: Vec<Rejection>,
}

impl Evidence {
    /// The verified keys, predicate types and predicates, as the admission policy takes them.
    pub fn policy_evidence(&self) -> trust::Evidence {
        let mut signatures: Vec<KeyId> = Vec::new();
        for s in &self.signatures {
            if !signatures.contains(&s.key_id) {
                signatures.push(s.key_id.clone());
            }
        }
        let mut attestations: Vec<(KeyId, String)> = Vec::new();
        for a in &self.attestations {
            let pair = (a.key_id.clone(), a.predicate_type.clone());
            if !attestations.contains(&pair) {
                attestations.push(pair);
            }
        }
        let mut predicates: Vec<trust::policy::VerifiedPredicate> = Vec::new();
        for a in &self.attestations {
            let p = trust::policy::VerifiedPredicate {
                key: a.key_id.clone(),
                predicate_type: a.predicate_type.clone(),
                predicate: a.predicate.clone(),
            };
            if !predicates.contains(&p) {
                predicates.push(p);
            }
        }
        trust::Evidence {
            signatures,
            attestations,
            predicates,
        }
    }

    /// Rejected signature layers.
    pub fn rejected_signatures(&self) -> impl Iterator<Item = &Rejection> {
        self.rejected.iter().filter(|r| r.kind == "signature")
    }
}

fn reason_of(e: &SignatureError) -> (&'static str, Option<String>) {
    match e {
        SignatureError::BadSignature { .. } => ("bad_signature", None),
        SignatureError::DigestMismatch { found, .. } => ("digest_mismatch", Some(found.clone())),
        SignatureError::PayloadTampered { .. } => ("payload_tampered", None),
        SignatureError::NoSignature { .. } => ("no_signature", None),
        _ => ("malformed", None),
    }
}

/// Reads and verifies every signature and attestation of `digest` in `r`'s repository or
/// layout with `keys` (see the module docs). Only failures to reach the source are errors; a
/// layer that does not verify, or whose payload cannot be read, is a [`Rejection`].
pub async fn fetch_evidence(
    client: &Client,
    r: &ImageRef,
    digest: &Digest,
    keys: &[VerifyingKey],
) -> Result<Evidence, TransferError> {
    let store = Store::open(client, r)?;
    let mut ev = Evidence {
        subject: digest.clone(),
        signatures: Vec::new(),
        attestations: Vec::new(),
        rejected: Vec::new(),
    };
    // (manifest bytes, origin)
    let mut manifests: Vec<(Bytes, Origin)> = Vec::new();
    for tag in [
        cosign::signature_tag(digest),
        cosign::attestation_tag(digest),
    ] {
        if let Some((c, bytes)) = store.tagged_content(&tag).await? {
            manifests.push((
                bytes,
                Origin {
                    found_by: "cosign-tag".to_owned(),
                    manifest: c.digest,
                    tag: Some(tag),
                },
            ));
        }
    }
    for (c, found_by) in store.cosign_referrers(digest).await? {
        if manifests.iter().any(|(_, o)| o.manifest == c.digest) {
            continue;
        }
        match store.source.document(&c).await {
            Ok(bytes) => manifests.push((
                bytes,
                Origin {
                    found_by: found_by.to_owned(),
                    manifest: c.digest,
                    tag: None,
                },
            )),
            Err(e) if e.kind() == crate::image::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let mut seen: HashSet<(Digest, String)> = HashSet::new();
    for (bytes, origin) in manifests {
        if let Some(kind) = bundle_manifest_kind(&bytes) {
            verify_bundles(
                &store, &bytes, kind, origin, keys, digest, &mut seen, &mut ev,
            )
            .await;
            continue;
        }
        let layers = match cosign::parse_layers(&bytes) {
            Ok(l) => l,
            Err(e) => {
                ev.rejected.push(Rejection {
                    kind: "signature",
                    layer: origin.manifest.clone(),
                    reason: "malformed",
                    message: e.to_string(),
                    other_digest: None,
                    origin,
                });
                continue;
            }
        };
        for layer in layers {
            // The same layer in the tag and in a referrer counts once.
            if !seen.insert((layer.payload.digest.clone(), layer.signature_b64.clone())) {
                continue;
            }
            let kind = if layer.payload.media_type == cosign::SIMPLE_SIGNING_MEDIA_TYPE {
                "signature"
            } else if layer.payload.media_type == trust::dsse::DSSE_MEDIA_TYPE {
                "attestation"
            } else {
                continue;
            };
            let payload = match store.payload(&layer).await {
                Ok(p) => p,
                Err(e) => {
                    // The readers verify as they read.
                    ev.rejected
                        .push(unreadable(kind, &layer.payload.digest, &origin, &e));
                    continue;
                }
            };
            let reject = |e: SignatureError| {
                let (reason, other_digest) = reason_of(&e);
                Rejection {
                    kind,
                    layer: layer.payload.digest.clone(),
                    origin: origin.clone(),
                    reason,
                    message: e.to_string(),
                    other_digest,
                }
            };
            if kind == "signature" {
                match cosign::verify_signature_layer(keys, &layer, &payload, digest) {
                    Ok(v) => ev.signatures.push(good_signature(v, &layer, &origin)),
                    Err(e) => ev.rejected.push(reject(e)),
                }
            } else {
                match attestation::verify_attestation_layer(keys, &layer, &payload, digest) {
                    Ok(v) => ev.attestations.push(good_attestation(v, &layer, &origin)),
                    Err(e) => ev.rejected.push(reject(e)),
                }
            }
        }
    }
    Ok(ev)
}

/// For a sigstore-bundle referrer manifest, whether its annotation says it is a signature or
/// an attestation (what a rejection is filed under before its statement can be trusted);
/// `None` for cosign's legacy manifests.
fn bundle_manifest_kind(manifest: &[u8]) -> Option<&'static str> {
    let doc: Value = serde_json::from_slice(manifest).ok()?;
    let typed = |v: &Value| v.as_str().is_some_and(bundle::is_bundle_media_type);
    let is_bundle = typed(&doc["artifactType"])
        || typed(&doc["config"]["mediaType"])
        || doc["layers"]
            .as_array()
            .is_some_and(|l| !l.is_empty() && l.iter().all(|l| typed(&l["mediaType"])));
    if !is_bundle {
        return None;
    }
    match doc["annotations"][bundle::PREDICATE_ANNOTATION].as_str() {
        None | Some(bundle::COSIGN_SIGN_PREDICATE) => Some("signature"),
        Some(_) => Some("attestation"),
    }
}

/// Verifies the bundle layers of one referrer manifest into `ev`: each bundle, once
/// verified, is a signature (predicate [`bundle::COSIGN_SIGN_PREDICATE`], or a message
/// signature) or an attestation of its statement's predicate type.
#[allow(clippy::too_many_arguments)]
async fn verify_bundles(
    store: &Store<'_>,
    manifest: &[u8],
    kind: &'static str,
    origin: Origin,
    keys: &[VerifyingKey],
    digest: &Digest,
    seen: &mut HashSet<(Digest, String)>,
    ev: &mut Evidence,
) {
    let layers = match bundle::bundle_layers(manifest) {
        Ok(l) if !l.is_empty() => l,
        Ok(_) => {
            ev.rejected.push(Rejection {
                kind,
                layer: origin.manifest.clone(),
                reason: "malformed",
                message: "sigstore bundle referrer has no bundle layer".to_owned(),
                other_digest: None,
                origin,
            });
            return;
        }
        Err(e) => {
            ev.rejected.push(Rejection {
                kind,
                layer: origin.manifest.clone(),
                reason: "malformed",
                message: e.to_string(),
                other_digest: None,
                origin,
            });
            return;
        }
    };
    for layer in layers {
        if !seen.insert((layer.digest.clone(), String::new())) {
            continue;
        }
        let c = Content {
            digest: layer.digest.clone(),
            size: layer.size,
            media_type: layer.media_type.clone(),
        };
        let bytes = match read_blob(&store.source, &c, bundle::MAX_BUNDLE_BYTES).await {
            Ok(b) => b,
            Err(e) => {
                ev.rejected
                    .push(unreadable(kind, &layer.digest, &origin, &e));
                continue;
            }
        };
        match bundle::verify_bundle_layer(keys, &layer, &bytes, digest) {
            Ok(v) if v.is_signature() => ev.signatures.push(GoodSignature {
                key_id: v.key_id,
                docker_reference: v.subject_name,
                digest: digest.clone(),
                annotations: v.annotations,
                layer: layer.digest.clone(),
                origin: origin.clone(),
            }),
            Ok(v) => ev.attestations.push(GoodAttestation {
                key_id: v.key_id,
                predicate_type: v.predicate_type,
                layer: layer.digest.clone(),
                origin: origin.clone(),
                predicate: v.predicate,
            }),
            Err(e) => {
                let (reason, other_digest) = reason_of(&e);
                ev.rejected.push(Rejection {
                    kind,
                    layer: layer.digest.clone(),
                    origin: origin.clone(),
                    reason,
                    message: e.to_string(),
                    other_digest,
                });
            }
        }
    }
}

/// A payload, envelope or bundle that could not be read: bytes that are not the layer's
/// digest are the tampered payload the trust check would name.
fn unreadable(kind: &'static str, layer: &Digest, origin: &Origin, e: &TransferError) -> Rejection {
    let tampered = e.kind() == crate::image::ErrorKind::Invalid;
    Rejection {
        kind,
        layer: layer.clone(),
        origin: origin.clone(),
        reason: if tampered {
            "payload_tampered"
        } else {
            "unreadable"
        },
        message: if tampered {
            format!(
                "payload blob does not match its layer digest {layer}: {}",
                validator::error_chain(e)
            )
        } else {
            validator::error_chain(e)
        },
        other_digest: None,
    }
}

fn good_signature(v: VerifiedSignature, layer: &SignatureLayer, origin: &Origin) -> GoodSignature {
    GoodSignature {
        key_id: v.key_id,
        docker_reference: v.docker_reference,
        digest: v.digest,
        annotations: v.optional.unwrap_or_default(),
        layer: layer.payload.digest.clone(),
        origin: origin.clone(),
    }
}

fn good_attestation(
    v: VerifiedAttestation,
    layer: &SignatureLayer,
    origin: &Origin,
) -> GoodAttestation {
    GoodAttestation {
        key_id: v.key_id,
        predicate_type: v.predicate_type,
        layer: layer.payload.digest.clone(),
        origin: origin.clone(),
        predicate: v.predicate,
    }
}

/// A registry repository or a layout, read and written.
struct Store<'a> {
    source: Source<'a>,
    client: &'a Client,
}

impl<'a> Store<'a> {
    fn open(client: &'a Client, r: &ImageRef) -> Result<Self, TransferError> {
        Ok(Store {
            source: Source::open(client, r)?,
            client,
        })
    }

    /// The manifest at a tag, if there is one.
    async fn tagged(&self, tag: &str) -> Result<Option<Bytes>, TransferError> {
        Ok(self.tagged_content(tag).await?.map(|(_, b)| b))
    }

    async fn tagged_content(&self, tag: &str) -> Result<Option<(Content, Bytes)>, TransferError> {
        self.source.tagged(tag).await
    }

    /// The referrers of `subject` whose artifact type is cosign's signature type, a DSSE
    /// attestation or a sigstore bundle, with how they were found.
    async fn cosign_referrers(
        &self,
        subject: &Digest,
    ) -> Result<Vec<(Content, &'static str)>, TransferError> {
        let is_cosign = |t: Option<&str>| {
            t.is_some_and(|t| {
                t == ARTIFACT_SIG_CONFIG_MEDIA_TYPE
                    || t.starts_with("application/vnd.dev.cosign.artifact.")
                    || bundle::is_bundle_media_type(t)
            })
        };
        let mut out = Vec::new();
        match &self.source {
            Source::Layout(layout) => {
                for entry in &layout_index(layout)?.manifests {
                    let c = content_of(entry);
                    if let Some((r, s)) = layout_subject(layout, &c)
                        && &s == subject
                        && is_cosign(r.artifact_type.as_deref())
                    {
                        out.push((c, "layout"));
                    }
                }
            }
            Source::Registry(client, reference) => {
                let found = client
                    .referrers(reference, subject)
                    .await
                    .map_err(|source| TransferError::Registry {
                        reference: format!("{reference} (referrers of {subject})"),
                        source,
                    })?;
                let by = match found.from {
                    ReferrersFrom::Api => "referrers-api",
                    _ => "referrers-tag",
                };
                for m in found.manifests {
                    if is_cosign(m.artifact_type.as_deref()) {
                        out.push((
                            Content {
                                digest: m.digest,
                                size: m.size,
                                media_type: m.media_type,
                            },
                            by,
                        ));
                    }
                }
            }
        }
        Ok(out)
    }

    async fn has_referrers_api(&self, subject: &Digest) -> Result<bool, TransferError> {
        match &self.source {
            Source::Layout(_) => Ok(false),
            Source::Registry(client, reference) => client
                .referrers(reference, subject)
                .await
                .map(|r| r.from == ReferrersFrom::Api)
                .map_err(|source| TransferError::Registry {
                    reference: format!("{reference} (referrers of {subject})"),
                    source,
                }),
        }
    }

    /// A payload or envelope, read whole (bounded) and verified against the layer's digest on
    /// the way: bytes that do not match fail with an error of class `Invalid`.
    async fn payload(&self, layer: &SignatureLayer) -> Result<Vec<u8>, TransferError> {
        let c = Content {
            digest: layer.payload.digest.clone(),
            size: layer.payload.size,
            media_type: layer.payload.media_type.clone(),
        };
        read_blob(&self.source, &c, MAX_PAYLOAD_BYTES).await
    }

    async fn put_blob(&self, bytes: &[u8]) -> Result<Digest, TransferError> {
        let digest = Digest::sha256(bytes);
        match &self.source {
            Source::Layout(layout) => {
                layout
                    .write_document(bytes)
                    .map_err(Source::layout_err(layout))?;
            }
            Source::Registry(client, r) => {
                client
                    .push_blob(r.registry(), r.name(), &digest, bytes.len() as u64, bytes)
                    .await
                    .map_err(|source| TransferError::Registry {
                        reference: r.with_digest(digest.clone()).to_string(),
                        source,
                    })?;
            }
        }
        Ok(digest)
    }

    /// Uploads the config and writes the manifest at `tag`.
    async fn put_attached(
        &self,
        m: &AttachedManifest,
        tag: &str,
        kind: &str,
        subject: &Content,
    ) -> Result<(), TransferError> {
        self.put_blob(&m.config).await?;
        let t = Tag::parse(tag).expect("a cosign tag is a valid tag");
        let content = manifest_content(m);
        match &self.source {
            Source::Layout(layout) => {
                layout
                    .write_document(&m.manifest)
                    .map_err(Source::layout_err(layout))?;
                write_cosign_entries(layout, &t, kind, &content, Some(subject))
            }
            // The copy path's registry writer: the manifest byte-exact under the tag.
            Source::Registry(client, r) => {
                Dest::Registry(r.clone())
                    .put_manifest(client, &content, &Bytes::from(m.manifest.clone()), Some(&t))
                    .await
            }
        }
    }

    /// Writes a referrer through the copy path's referrer writer: the API or the tag schema
    /// the client keeps at a registry, an untagged `index.json` entry in a layout.
    async fn put_referrer(&self, m: &AttachedManifest) -> Result<(), TransferError> {
        self.put_blob(&m.config).await?;
        let artifact_type = serde_json::from_slice::<Value>(&m.manifest)
            .ok()
            .and_then(|d| d["artifactType"].as_str().map(str::to_owned));
        let (dest, client) = match &self.source {
            Source::Registry(client, r) => (Dest::Registry(r.clone()), *client),
            Source::Layout(layout) => (Dest::Layout(layout.clone()), self.client),
        };
        dest.put_referrer(
            client,
            &manifest_content(m),
            &Bytes::from(m.manifest.clone()),
            artifact_type.as_deref(),
        )
        .await
    }
}

/// The descriptor of a cosign manifest built by `trust`.
fn manifest_content(m: &AttachedManifest) -> Content {
    Content {
        digest: m.manifest_digest.clone(),
        size: m.manifest.len() as u64,
        media_type: OCI_MANIFEST_MEDIA_TYPE.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::LayoutRef;
    use trust::intoto::{PREDICATE_SPDX, Statement};
    use validator::{ImageLayout, IndexEntry};

    /// A layout with one small image tagged v1; returns its reference and the image.
    fn layout(dir: &std::path::Path) -> (ImageRef, Content) {
        let l = ImageLayout::create(dir.join("l")).unwrap();
        let config =
            br#"{"architecture":"amd64","os":"illumos","rootfs":{"type":"layers","diff_ids":[]}}"#;
        let cd = l.write_document(config).unwrap();
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "size": config.len(), "digest": cd.as_str()},
            "layers": [],
        }))
        .unwrap();
        let md = l.write_document(&manifest).unwrap();
        let image = Content {
            digest: md,
            size: manifest.len() as u64,
            media_type: OCI_MANIFEST_MEDIA_TYPE.to_owned(),
        };
        let tag = Tag::parse("v1").unwrap();
        l.set_tag(
            &tag,
            IndexEntry::new(image.media_type.clone(), image.digest.clone(), image.size),
        )
        .unwrap();
        let r = ImageRef::Layout(LayoutRef {
            dir: dir.join("l"),
            tag: Some(tag),
            digest: None,
        });
        (r, image)
    }

    async fn sign(
        client: &Client,
        r: &ImageRef,
        image: &Content,
        over: &Digest,
        k: &trust::KeyPair,
    ) {
        let payload = cosign::SimpleSigning::new("example/app", over, None).to_bytes();
        let sig = cosign::sign(&k.signing, &payload);
        push_signature(client, r, image, &payload, &sig, k.verifying(), true)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn layout_signatures_round_trip_with_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let client = Client::builder().build().unwrap();
        let (r, image) = layout(dir.path());
        assert_eq!(resolve(&client, &r).await.unwrap(), image);
        let (alice, bob) = (trust::generate(), trust::generate());

        let ev = fetch_evidence(&client, &r, &image.digest, &[alice.verifying().clone()])
            .await
            .unwrap();
        assert!(ev.signatures.is_empty() && ev.rejected.is_empty());

        sign(&client, &r, &image, &image.digest, &alice).await;
        // Signing twice with the same key adds nothing.
        sign(&client, &r, &image, &image.digest, &alice).await;
        let ev = fetch_evidence(&client, &r, &image.digest, &[alice.verifying().clone()])
            .await
            .unwrap();
        assert_eq!(ev.signatures.len(), 1, "{ev:?}");
        assert_eq!(&ev.signatures[0].key_id, alice.verifying().key_id());
        assert_eq!(ev.signatures[0].origin.found_by, "cosign-tag");

        // Bob's signature of another manifest, on this image's tag: a replay.
        sign(&client, &r, &image, &Digest::sha256(b"other"), &bob).await;
        let ev = fetch_evidence(&client, &r, &image.digest, &[bob.verifying().clone()])
            .await
            .unwrap();
        assert!(ev.signatures.is_empty());
        let reasons: Vec<&str> = ev.rejected.iter().map(|r| r.reason).collect();
        assert_eq!(reasons, ["bad_signature", "digest_mismatch"], "{ev:?}");
        assert_eq!(
            ev.rejected[1].other_digest.as_deref(),
            Some(Digest::sha256(b"other").as_str())
        );

        // An attestation, and the policy's view of it all.
        let st = Statement::for_image(
            "example/app",
            &image.digest,
            PREDICATE_SPDX,
            serde_json::json!({"spdxVersion": "SPDX-2.3"}),
        );
        let env = trust::attestation::sign_statement(&alice.signing, &st);
        push_attestation(&client, &r, &image, &env, PREDICATE_SPDX, false)
            .await
            .unwrap();
        let ev = fetch_evidence(
            &client,
            &r,
            &image.digest,
            &[alice.verifying().clone(), bob.verifying().clone()],
        )
        .await
        .unwrap();
        let policy = ev.policy_evidence();
        assert_eq!(policy.signatures, vec![alice.verifying().key_id().clone()]);
        assert_eq!(
            policy.attestations,
            vec![(
                alice.verifying().key_id().clone(),
                PREDICATE_SPDX.to_owned()
            )]
        );
        // The layout still resolves to the one image without a tag.
        let untagged = ImageRef::Layout(LayoutRef {
            dir: dir.path().join("l"),
            tag: None,
            digest: None,
        });
        assert_eq!(resolve(&client, &untagged).await.unwrap(), image);
    }
}
