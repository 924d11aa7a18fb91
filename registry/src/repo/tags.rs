//! The tag index document (`repositories/<name>/_tags`): each tag's target, and when an image
//! tag last changed (what the pages call the repository's last push).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use validator::Digest;

/// A tag's target: the manifest's digest with its media type and size, so a manifest GET by
/// tag needs the tag index and the manifest bytes only (2 store reads), not the link as well.
/// The three fields change together in one conditional write of the tag index, so a reader
/// never sees a digest with another manifest's media type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TagTarget {
    pub digest: Digest,
    pub media_type: String,
    pub size: u64,
    /// The epoch of the manifest link the tag was set with (`docs/gc.md`, "The API's
    /// DELETEs"): a DELETE of the manifest removes the tags set before it moved the link, and
    /// leaves a tag a push set after (at the new epoch). Absent: the legacy epoch.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub epoch: String,
}

/// A tag index entry: a [`TagTarget`], or a bare digest as written before tags carried the
/// media type (still read; the link supplies the rest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum TagEntry {
    Target(TagTarget),
    Digest(Digest),
}

impl TagEntry {
    pub(super) fn digest(&self) -> &Digest {
        match self {
            TagEntry::Target(t) => &t.digest,
            TagEntry::Digest(d) => d,
        }
    }

    /// The epoch of the link the tag was set with (`""`: the legacy one, or not recorded).
    pub(super) fn epoch(&self) -> &str {
        match self {
            TagEntry::Target(t) => &t.epoch,
            TagEntry::Digest(_) => "",
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct TagsDoc {
    pub(super) tags: BTreeMap<String, TagEntry>,
    /// When a tag other than cosign's ([`is_cosign_tag`]) was last set, moved or removed, in
    /// seconds since 1970: a signature pushed under `sha256-<hex>.sig` is no change of the
    /// repository's images. Absent from an index no image tag changed in since it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) pushed: Option<u64>,
}

impl TagsDoc {
    /// Notes a change of `tag` (set, moved or removed): a push, unless it is cosign's.
    pub(super) fn changed(&mut self, tag: &str) {
        if !is_cosign_tag(tag) {
            let now = SystemTime::now().duration_since(UNIX_EPOCH);
            self.pushed = Some(now.map_or(0, |d| d.as_secs()));
        }
    }
}

/// Whether `t` is one of cosign's tags (`sha256-<64 hex>.sig`, `.att`, `.sbom`): an artifact
/// about an image, shown with it, not a tag of its own.
pub(crate) fn is_cosign_tag(t: &str) -> bool {
    let Some((base, suffix)) = t.rsplit_once('.') else {
        return false;
    };
    matches!(suffix, "sig" | "att" | "sbom")
        && base.strip_prefix("sha256-").is_some_and(|hex| {
            hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}
