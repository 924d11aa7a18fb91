//! Publishing a built image: sign it in its layout, attest it, push it. What `rdctl build
//! --sign-key [--attest] --push` runs, and what `rdctl sign` and `rdctl attest` run for one
//! image; any other front end can publish the same way.
//!
//! The input is the builder's output as plain data ([`Built`]: the layout directory, its tag,
//! the manifest and SBOM digests), so this crate does not depend on `builder`. Statements to
//! attest are made by the caller (an SLSA provenance names the image file and lockfile, which
//! only the builder reads). Everything is async and runs on the caller's runtime; the order is
//! fixed: the signature and the attestations are written into the layout first, so a push
//! carries them along ([`crate::transfer::copy`] copies cosign's tags and referrers).

use std::collections::BTreeMap;
use std::path::PathBuf;

use trust::SigningKey;
use trust::cosign::{self, SimpleSigning};
use trust::intoto::{self, Statement};
use validator::{Digest, Tag};

use crate::image::{Content, ImageRef, LayoutRef, TransferError};
use crate::signatures::{self, Pushed};
use crate::transfer::{CopyOptions, copy};
use crate::{Client, Reference};

/// Why publishing failed: which step, on which image, and the error underneath.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The image to sign could not be resolved.
    #[error("cannot resolve {target}")]
    Resolve {
        /// The image.
        target: String,
        /// Why.
        #[source]
        source: TransferError,
    },
    /// The layout's tag names another image than the one built.
    #[error("{target} names {found}, not the built image {built}")]
    NotTheBuiltImage {
        /// The layout and tag.
        target: String,
        /// What it names.
        found: Digest,
        /// What was built.
        built: Digest,
    },
    /// The signature could not be written.
    #[error("cannot push the signature of {subject}")]
    Sign {
        /// The signed image.
        subject: Digest,
        /// Why.
        #[source]
        source: TransferError,
    },
    /// A statement (attestation or sigstore bundle) could not be written.
    #[error("cannot push the {predicate_type} {what} of {subject}")]
    Attest {
        /// `attestation` or `bundle`.
        what: &'static str,
        /// The statement's predicate type.
        predicate_type: String,
        /// The image.
        subject: Digest,
        /// Why.
        #[source]
        source: TransferError,
    },
    /// The push of the built image failed.
    #[error("cannot push {layout} to {destination}")]
    Push {
        /// The layout pushed.
        layout: PathBuf,
        /// Where to.
        destination: String,
        /// Why.
        #[source]
        source: TransferError,
    },
}

/// How [`sign_image`] writes a signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignAs {
    /// At the `.sig` tag, and as a referrer too when asked and the registry has the API.
    Legacy {
        /// Also push the `.sig` layer set as an OCI 1.1 referrer.
        also_referrer: bool,
    },
    /// A sigstore bundle referrer (what cosign v3 writes by default).
    Bundle,
}

/// Signs the image `subject` at `target` and pushes the signature; its payload names
/// `docker_reference` (`HOST/REPO`, or the layout) as cosign's does.
pub async fn sign_image(
    client: &Client,
    target: &ImageRef,
    subject: &Content,
    docker_reference: &str,
    key: &SigningKey,
    annotations: Option<&BTreeMap<String, String>>,
    how: SignAs,
) -> Result<Pushed, PublishError> {
    let SignAs::Legacy { also_referrer } = how else {
        let mut st = trust::bundle::statement(
            docker_reference,
            &subject.digest,
            trust::bundle::COSIGN_SIGN_PREDICATE,
            serde_json::json!({}),
        );
        if let Some(a) = annotations {
            st.subject[0].annotations = a
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect();
        }
        return push_bundle(client, target, subject, &st, key).await;
    };
    let payload = SimpleSigning::new(docker_reference, &subject.digest, annotations).to_bytes();
    let sig = cosign::sign(key, &payload);
    signatures::push_signature(
        client,
        target,
        subject,
        &payload,
        &sig,
        key.verifying_key(),
        also_referrer,
    )
    .await
    .map_err(|source| PublishError::Sign {
        subject: subject.digest.clone(),
        source,
    })
}

/// Signs `statement` into a sigstore bundle and pushes it as a referrer of `subject`.
async fn push_bundle(
    client: &Client,
    target: &ImageRef,
    subject: &Content,
    statement: &Statement,
    key: &SigningKey,
) -> Result<Pushed, PublishError> {
    let bundle = trust::bundle::sign_bundle(key, statement);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    signatures::push_bundle(
        client,
        target,
        subject,
        &bundle,
        &statement.predicate_type,
        Some(&validator::rfc3339(now)),
    )
    .await
    .map_err(|source| PublishError::Attest {
        what: "bundle",
        predicate_type: statement.predicate_type.clone(),
        subject: subject.digest.clone(),
        source,
    })
}

/// Signs `statement` and pushes it as an attestation of `subject` (`replace`: the
/// attestations of the same predicate type go), or as a sigstore bundle with `bundle`.
pub async fn attest_image(
    client: &Client,
    target: &ImageRef,
    subject: &Content,
    statement: &Statement,
    key: &SigningKey,
    replace: bool,
    bundle: bool,
) -> Result<Pushed, PublishError> {
    if bundle {
        let mut st = statement.clone();
        st.statement_type = intoto::STATEMENT_V1.to_owned();
        return push_bundle(client, target, subject, &st, key).await;
    }
    let envelope = trust::attestation::sign_statement(key, statement);
    signatures::push_attestation(
        client,
        target,
        subject,
        &envelope,
        &statement.predicate_type,
        replace,
    )
    .await
    .map_err(|source| PublishError::Attest {
        what: "attestation",
        predicate_type: statement.predicate_type.clone(),
        subject: subject.digest.clone(),
        source,
    })
}

/// The builder's output, as publishing needs it.
#[derive(Debug, Clone)]
pub struct Built {
    /// The OCI layout directory.
    pub layout: PathBuf,
    /// The tag the image has in it (the image file's first).
    pub tag: Option<Tag>,
    /// The image manifest built.
    pub manifest: Digest,
}

impl Built {
    /// The built image as an [`ImageRef`] into its layout.
    pub fn image_ref(&self) -> ImageRef {
        ImageRef::Layout(LayoutRef {
            dir: self.layout.clone(),
            tag: self.tag.clone(),
            digest: None,
        })
    }
}

/// Signs the built image in its layout (before any push, which then carries the signature
/// and attestations along), then attests each of `statements` (e.g. the build's SPDX SBOM and
/// SLSA provenance): cosign v2's `.sig` and `.att` tags, which both cosign v2 and v3 verify
/// with a key. Checks first that the layout's tag still names the built manifest.
pub async fn sign_built(
    client: &Client,
    built: &Built,
    docker_reference: &str,
    key: &SigningKey,
    statements: &[Statement],
) -> Result<Vec<Pushed>, PublishError> {
    let target = built.image_ref();
    let subject = signatures::resolve(client, &target)
        .await
        .map_err(|source| PublishError::Resolve {
            target: target.to_string(),
            source,
        })?;
    if subject.digest != built.manifest {
        return Err(PublishError::NotTheBuiltImage {
            target: target.to_string(),
            found: subject.digest,
            built: built.manifest.clone(),
        });
    }
    let mut out = vec![
        sign_image(
            client,
            &target,
            &subject,
            docker_reference,
            key,
            None,
            SignAs::Legacy {
                also_referrer: false,
            },
        )
        .await?,
    ];
    for st in statements {
        out.push(attest_image(client, &target, &subject, st, key, true, false).await?);
    }
    Ok(out)
}

/// Pushes the built image (with its SBOM, signatures and attestations unless `referrers` is
/// off) to `target` under each of `tags`, in order; `before` is told each destination before
/// its push starts. Returns the references pushed.
pub async fn push_built(
    client: &Client,
    built: &Built,
    target: &Reference,
    tags: &[Tag],
    referrers: bool,
    before: &(dyn Fn(&Reference) + Sync),
) -> Result<Vec<Reference>, PublishError> {
    let src = built.image_ref();
    let mut pushed = Vec::new();
    for tag in tags {
        let tagged = target.with_tag(tag.clone());
        before(&tagged);
        let dst = ImageRef::Registry(tagged.clone());
        let report = copy(
            client,
            &src,
            &dst,
            &CopyOptions {
                referrers,
                ..CopyOptions::default()
            },
        )
        .await
        .map_err(|source| PublishError::Push {
            layout: built.layout.clone(),
            destination: dst.to_string(),
            source,
        })?;
        debug_assert_eq!(report.root.digest, built.manifest);
        pushed.push(tagged);
    }
    Ok(pushed)
}
