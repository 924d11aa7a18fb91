//! cosign's names: the `kind` annotations of a layout's `index.json` and the
//! `<alg>-<hex>.sig|.att|.sbom` tags, read by every operation that must tell an image from its
//! signatures.

/// The `index.json` annotation cosign's layouts use to tell the image, its signatures and
/// its attestations apart.
pub const KIND_ANNOTATION: &str = "kind";
/// [`KIND_ANNOTATION`] of the image entry.
pub const KIND_IMAGE: &str = "dev.cosignproject.cosign/image";
/// [`KIND_ANNOTATION`] of the signatures manifest.
pub const KIND_SIGS: &str = "dev.cosignproject.cosign/sigs";
/// [`KIND_ANNOTATION`] of the attestations manifest.
pub const KIND_ATTS: &str = "dev.cosignproject.cosign/atts";

/// What a tag's name says it is, before reading anything: `signature`, `attestation` or `sbom`
/// for cosign's `<alg>-<hex>.sig|.att|.sbom`, `referrers` for the referrers tag schema's
/// `<alg>-<hex>`; `None` for any other tag.
pub fn tag_name_kind(tag: &str) -> Option<&'static str> {
    let (base, suffix) = match tag.rsplit_once('.') {
        Some((b, s)) => (b, Some(s)),
        None => (tag, None),
    };
    let (alg, hex) = base.split_once('-')?;
    let digest_like = matches!(alg, "sha256" | "sha512")
        && (hex.len() == 64 || hex.len() == 128)
        && hex.bytes().all(|b| b.is_ascii_hexdigit());
    if !digest_like {
        return None;
    }
    match suffix {
        None => Some("referrers"),
        Some("sig") => Some("signature"),
        Some("att") => Some("attestation"),
        Some("sbom") => Some("sbom"),
        Some(_) => None,
    }
}

/// Whether a layout `index.json` entry is one of cosign's `.sig`/`.att`/`.sbom` manifests
/// rather than an image to choose.
pub(crate) fn is_cosign_entry(d: &validator::Descriptor) -> bool {
    matches!(
        d.annotations.get(KIND_ANNOTATION).map(String::as_str),
        Some(KIND_SIGS | KIND_ATTS)
    ) || d.ref_name().is_some_and(|t| tag_name_kind(t).is_some())
}
