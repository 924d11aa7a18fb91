//! The image file's `[signatures]` policy applied to every package a lock or a build reads:
//! pkg's `signature-policy` through [`ips_bridge::verify_manifest`], with certificates from the
//! package's own publisher (its file store, verified against the hashes the signature names).

use std::io::Write;
use std::path::PathBuf;

use ips_bridge::{
    Action, Fmri, Manifest, SignatureError, SignaturePolicy, TrustAnchors, verify_manifest,
};

use crate::imagefile::ImageFile;
use crate::source::Source;

/// The most bytes a certificate may have: a PEM certificate is a few kilobytes, and the
/// payload is held in memory to be parsed.
const MAX_CERT_BYTES: usize = 1 << 20;

/// A buffer that refuses to grow past [`MAX_CERT_BYTES`].
struct Capped(Vec<u8>);

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_CERT_BYTES {
            return Err(std::io::Error::other(format!(
                "certificate larger than {MAX_CERT_BYTES} bytes"
            )));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A package refused by the image file's signature policy.
#[derive(Debug, thiserror::Error)]
#[error("package {fmri}: refused by signature policy {policy} ({image})")]
pub struct SignatureRefused {
    /// The package.
    pub fmri: String,
    /// The policy.
    pub policy: SignaturePolicy,
    /// The image file that sets it.
    pub image: PathBuf,
    /// Why.
    #[source]
    pub source: SignatureError,
}

/// The trust anchors of an image file could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("{image}: signatures.trust_anchors")]
pub struct TrustAnchorsError {
    /// The image file.
    pub image: PathBuf,
    /// What failed (names the directory or file).
    #[source]
    pub source: SignatureError,
}

/// The policy of one image file, with its trust anchors loaded.
pub(crate) struct SignatureCheck {
    policy: SignaturePolicy,
    anchors: Option<TrustAnchors>,
    image: PathBuf,
}

impl SignatureCheck {
    /// Loads the trust anchors `image` names (none under `ignore`).
    pub(crate) fn for_image(image: &ImageFile) -> Result<Self, TrustAnchorsError> {
        let sig = &image.signatures;
        let anchors = match (&sig.trust_anchors, sig.policy) {
            (_, SignaturePolicy::Ignore) | (None, _) => None,
            (Some(dir), _) => {
                Some(
                    TrustAnchors::load_dir(dir).map_err(|source| TrustAnchorsError {
                        image: image.path.clone(),
                        source,
                    })?,
                )
            }
        };
        Ok(SignatureCheck {
            policy: sig.policy,
            anchors,
            image: image.path.clone(),
        })
    }

    /// Checks `manifest` of `fmri`, fetching certificates from `source`.
    pub(crate) fn check(
        &self,
        source: &Source,
        fmri: &Fmri,
        manifest: &Manifest,
    ) -> Result<(), Box<SignatureRefused>> {
        if self.policy == SignaturePolicy::Ignore {
            return Ok(());
        }
        let mut fetch =
            |cert: &Action| -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>> {
                let mut pem = Capped(Vec::new());
                source.payload(fmri, cert, &mut pem)?;
                Ok(pem.0)
            };
        verify_manifest(manifest, self.policy, self.anchors.as_ref(), &mut fetch)
            .map(drop)
            .map_err(|source| {
                Box::new(SignatureRefused {
                    fmri: fmri.to_string(),
                    policy: self.policy,
                    image: self.image.clone(),
                    source,
                })
            })
    }
}
