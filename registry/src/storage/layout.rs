//! Every key the registry stores, and the only code that builds them.
//!
//! ```text
//! blobs/<alg>/<hex[0..2]>/<hex>/data          blob bytes (layers, configs and manifests), one copy
//!                                              for the whole registry; written only by committing
//!                                              a verified staging area or a verified document
//! blobs/<alg>/<hex[0..2]>/<hex>/data-<epoch>  the same bytes written after a collector committed
//!                                              to deleting the copy before (`record`: a late
//!                                              DELETE of the old key cannot reach these)
//! repositories/<name>/_repo                    marker: the repository exists (created on first push)
//! repositories/<name>/_blobs/<alg>/<hex>       link: the repository may serve this blob (JSON
//!                                              {"size"})
//! repositories/<name>/_blobs/<alg>/<hex>-<epoch> the same link written after a collector
//!                                              committed to deleting the one before
//! repositories/<name>/_manifests/<alg>/<hex>   link: the manifest is in the repository (JSON
//!                                              {"mediaType","size","subject"?,"artifactType"?})
//! repositories/<name>/_tags                    index document: {"tags":{tag: digest}}, replaced
//!                                              with a conditional write
//! repositories/<name>/_referrers/<alg>/<hex>   index document: the descriptors of manifests in the
//!                                              repository whose subject is this digest
//! blobs/<alg>/<hex[0..2]>/<hex>/used[-<epoch>] hold record: rewritten by every request that
//!                                              starts relying on existing content (garbage
//!                                              collection's write barrier, see `gc`), one per
//!                                              epoch of the bytes
//! blobs/<alg>/<hex[0..2]>/<hex>/gc            the digest's record (`record`): which epoch of its
//!                                              keys is current, and a collector's tombstone while
//!                                              it decides; never deleted once an epoch moved
//! gc/lock                                      lease of the one running collector
//! catalog                                      index document: {"repositories":[names]}
//! uploads/<uuid>/data                          staging area of an upload (never readable as a blob)
//! uploads/<uuid>/state                         upload state: repository, offset, hash states
//! _rd/pkgindex/<name>/_index.json              package index of the repository: the packages
//!                                              of each SBOM referrer by subject (`pkgindex`);
//!                                              derived data, rebuilt by `registry reindex`
//! _rd/usage/<name>/_usage.json                 quota usage of the repository: its manifests with
//!                                              their sizes and blobs, and the totals; replaced
//!                                              with a conditional write (`governance::quota`)
//! _rd/pulls/<name>/_pulls.json                 last pull time of each manifest, merged in
//!                                              batches by every replica (`governance::retention`)
//! _rd/quarantine/<alg>/<hex>/data             bytes a scrub found corrupt, moved aside (`scrub`)
//! _rd/quarantine/<alg>/<hex>/record           what the scrub found: expected and found digest
//! _rd/quarantine/<alg>/<hex>/staging          staging area of the copy aside
//! _rd/sync/lock                                lease of scheduled sync (`mirror`), one replica at a time
//! _rd/sync/<name>/state                        state of a `[[sync]]` entry: last run, success, error, history
//! _rd/scrub/last                               start time of the last scheduled scrub
//! _rd/events/<endpoint>/<ms>-<event id>        outbox entry: an event not yet delivered to the
//!                                              endpoint, with its claim and retry state (`events`)
//! ```
//!
//! Names and digests arrive here already checked ([`Name`], [`Digest`], [`Uuid`]), and every key
//! is checked again by [`Key::new`].

use uuid::Uuid;
use validator::Digest;

use super::Key;
use validator::Name;

fn key(s: String) -> Key {
    // Every input is pre-validated, so a failure here is a programming error.
    Key::new(s).expect("layout builds keys only from checked names, digests and ids")
}

/// Where a blob's bytes live.
pub fn blob_data(d: &Digest) -> Key {
    let hex = d.encoded();
    key(format!(
        "blobs/{}/{}/{}/data",
        d.algorithm(),
        &hex[..2],
        hex
    ))
}

/// Where a blob's bytes of epoch `epoch` live (`""`: the legacy key [`blob_data`]).
pub fn blob_data_at(d: &Digest, epoch: &str) -> Key {
    at_epoch(blob_data(d), epoch)
}

/// `k` with `-<epoch>` appended to its last segment, or `k` itself for the legacy epoch `""`.
/// Epochs are checked by [`epoch_ok`] where they are read, so the key stays valid.
fn at_epoch(k: Key, epoch: &str) -> Key {
    if epoch.is_empty() {
        k
    } else {
        debug_assert!(epoch_ok(epoch), "unchecked epoch {epoch:?}");
        key(format!("{}-{epoch}", k.as_str()))
    }
}

/// Whether `e` can be an epoch: 1 to 32 lowercase hex digits (`record` makes 16).
pub fn epoch_ok(e: &str) -> bool {
    (1..=32).contains(&e.len()) && e.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Splits `name-epoch` into its name and epoch (`""` when there is none).
fn split_epoch(segment: &str) -> Option<(&str, &str)> {
    match segment.split_once('-') {
        None => Some((segment, "")),
        Some((n, e)) if epoch_ok(e) => Some((n, e)),
        Some(_) => None,
    }
}

/// The hold record of a digest, rewritten by requests that start relying on its content.
pub fn blob_used(d: &Digest) -> Key {
    blob_data(d)
        .as_str()
        .strip_suffix("/data")
        .map(|dir| key(format!("{dir}/used")))
        .expect("blob keys end in /data")
}

/// The hold record of the bytes of epoch `epoch`.
pub fn blob_used_at(d: &Digest, epoch: &str) -> Key {
    at_epoch(blob_used(d), epoch)
}

/// The tombstone a collector writes while it decides about a digest.
pub fn blob_tombstone(d: &Digest) -> Key {
    blob_data(d)
        .as_str()
        .strip_suffix("/data")
        .map(|dir| key(format!("{dir}/gc")))
        .expect("blob keys end in /data")
}

/// The collector's lease.
pub fn gc_lock() -> Key {
    key("gc/lock".to_owned())
}

/// What a key under [`blobs_root`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobPart {
    /// The bytes of this epoch ([`blob_data_at`]).
    Data(String),
    /// The hold record of this epoch ([`blob_used_at`]).
    Used(String),
    /// A collector's tombstone ([`blob_tombstone`]).
    Tombstone,
}

/// Parses a key under [`blobs_root`] back into its digest and part; `None` for anything else.
pub fn parse_blob_key(k: &Key) -> Option<(Digest, BlobPart)> {
    let parts: Vec<&str> = k.as_str().split('/').collect();
    let ["blobs", alg, _, hex, last] = parts.as_slice() else {
        return None;
    };
    let part = match split_epoch(last)? {
        ("data", e) => BlobPart::Data(e.to_owned()),
        ("used", e) => BlobPart::Used(e.to_owned()),
        ("gc", "") => BlobPart::Tombstone,
        _ => return None,
    };
    let d = Digest::parse(&format!("{alg}:{hex}")).ok()?;
    (blob_data(&d) == Key::new(format!("blobs/{alg}/{}/{hex}/data", parts[2])).ok()?)
        .then_some((d, part))
}

/// Prefix of every repository (for GC).
pub fn repositories_root() -> Key {
    key("repositories".to_owned())
}

/// What a key under [`repositories_root`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepoPart {
    /// [`repository_marker`].
    Marker,
    /// [`blob_link_at`] of this digest and epoch.
    BlobLink(Digest, String),
    /// [`manifest_link_at`] of this digest and epoch.
    ManifestLink(Digest, String),
    /// [`tags`].
    Tags,
    /// [`referrers`] of this subject.
    Referrers(Digest),
}

/// Parses a key under [`repositories_root`] into its repository and part; `None` for anything
/// else. Repository name segments never start with `_`, so the first such segment ends the name.
pub fn parse_repo_key(k: &Key) -> Option<(Name, RepoPart)> {
    let rest = k.as_str().strip_prefix("repositories/")?;
    let at = rest.find("/_")?;
    let name = Name::parse(&rest[..at]).ok()?;
    let parts: Vec<&str> = rest[at + 1..].split('/').collect();
    let digest = |alg: &str, hex: &str| Digest::parse(&format!("{alg}:{hex}")).ok();
    let part = match parts.as_slice() {
        ["_repo"] => RepoPart::Marker,
        ["_tags"] => RepoPart::Tags,
        ["_blobs", alg, hex] => {
            let (hex, epoch) = split_epoch(hex)?;
            RepoPart::BlobLink(digest(alg, hex)?, epoch.to_owned())
        }
        ["_manifests", alg, hex] => {
            let (hex, epoch) = split_epoch(hex)?;
            RepoPart::ManifestLink(digest(alg, hex)?, epoch.to_owned())
        }
        ["_referrers", alg, hex] => RepoPart::Referrers(digest(alg, hex)?),
        _ => return None,
    };
    Some((name, part))
}

/// Prefix of every blob (for GC).
pub fn blobs_root() -> Key {
    key("blobs".to_owned())
}

/// Prefix of one repository.
pub fn repository(name: &Name) -> Key {
    key(format!("repositories/{name}"))
}

/// Marker document: the repository exists.
pub fn repository_marker(name: &Name) -> Key {
    key(format!("repositories/{name}/_repo"))
}

/// Link: the repository may serve this blob.
pub fn blob_link(name: &Name, d: &Digest) -> Key {
    key(format!(
        "repositories/{name}/_blobs/{}/{}",
        d.algorithm(),
        d.encoded()
    ))
}

/// The repository's link to this blob of epoch `epoch` (`""`: [`blob_link`]).
pub fn blob_link_at(name: &Name, d: &Digest, epoch: &str) -> Key {
    at_epoch(blob_link(name, d), epoch)
}

/// Link: the manifest belongs to the repository.
pub fn manifest_link(name: &Name, d: &Digest) -> Key {
    key(format!(
        "repositories/{name}/_manifests/{}/{}",
        d.algorithm(),
        d.encoded()
    ))
}

/// The repository's link to manifest `d` of epoch `epoch` (`""`: [`manifest_link`]).
pub fn manifest_link_at(name: &Name, d: &Digest, epoch: &str) -> Key {
    at_epoch(manifest_link(name, d), epoch)
}

/// Prefix of every manifest link of the repository.
pub fn manifest_links(name: &Name) -> Key {
    key(format!("repositories/{name}/_manifests"))
}

/// The repository's tag index.
pub fn tags(name: &Name) -> Key {
    key(format!("repositories/{name}/_tags"))
}

/// The referrers index of `subject` in the repository.
pub fn referrers(name: &Name, subject: &Digest) -> Key {
    key(format!(
        "repositories/{name}/_referrers/{}/{}",
        subject.algorithm(),
        subject.encoded()
    ))
}

/// The repository catalog index.
pub fn catalog() -> Key {
    key("catalog".to_owned())
}

/// The package index document of a repository (see `crate::pkgindex`).
pub fn package_index(name: &Name) -> Key {
    key(format!("_rd/pkgindex/{name}/_index.json"))
}

/// The quota usage document of a repository (see `crate::governance::quota`).
pub fn repository_usage(name: &Name) -> Key {
    key(format!("_rd/usage/{name}/_usage.json"))
}

/// The pull-time document of a repository (see `crate::governance::retention`).
pub fn repository_pulls(name: &Name) -> Key {
    key(format!("_rd/pulls/{name}/_pulls.json"))
}

/// Where a scrub keeps the bytes of a corrupt blob.
pub fn quarantine_data(d: &Digest) -> Key {
    key(format!(
        "_rd/quarantine/{}/{}/data",
        d.algorithm(),
        d.encoded()
    ))
}

/// The staging area of a quarantine copy.
pub fn quarantine_staging(d: &Digest) -> Key {
    key(format!(
        "_rd/quarantine/{}/{}/staging",
        d.algorithm(),
        d.encoded()
    ))
}

/// What a scrub recorded about a quarantined blob.
pub fn quarantine_record(d: &Digest) -> Key {
    key(format!(
        "_rd/quarantine/{}/{}/record",
        d.algorithm(),
        d.encoded()
    ))
}

/// The lease of scheduled sync (`[[sync]]`): one replica runs the due entries at a time.
pub fn sync_lock() -> Key {
    key("_rd/sync/lock".to_owned())
}

/// The state of one `[[sync]]` entry (its name is checked when the configuration is read).
pub fn sync_state(name: &str) -> Key {
    key(format!("_rd/sync/{name}/state"))
}

/// The start time of the last scheduled scrub (replicas take turns through it).
pub fn scrub_last() -> Key {
    key("_rd/scrub/last".to_owned())
}

/// The outbox of a notification endpoint (its name is checked as a key segment when the
/// configuration is read).
pub fn event_outbox(endpoint: &str) -> Key {
    key(format!("_rd/events/{endpoint}"))
}

/// One outbox entry of a notification endpoint.
pub fn event_entry(endpoint: &str, entry: &str) -> Key {
    key(format!("_rd/events/{endpoint}/{entry}"))
}

/// Prefix of every upload (for expiry).
pub fn uploads_root() -> Key {
    key("uploads".to_owned())
}

/// Staging area of an upload.
pub fn upload_data(id: &Uuid) -> Key {
    key(format!("uploads/{}/data", id.as_hyphenated()))
}

/// State document of an upload.
pub fn upload_state(id: &Uuid) -> Key {
    key(format!("uploads/{}/state", id.as_hyphenated()))
}

/// Whether `key` belongs to an upload session (its staging data or state). A session is
/// resumable state, not stored content: a store may skip making its documents durable (see
/// `crate::storage::fs`), since a session a machine crash loses costs its client a restart
/// (`BLOB_UPLOAD_UNKNOWN`), never a blob.
pub fn is_upload(key: &Key) -> bool {
    key.as_str().starts_with("uploads/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_as_documented() {
        let d = Digest::sha256(b"");
        let n = Name::parse("conformance/repo1").unwrap();
        assert_eq!(
            blob_data(&d).as_str(),
            "blobs/sha256/e3/e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855/data"
        );
        assert_eq!(
            manifest_link(&n, &d).as_str(),
            "repositories/conformance/repo1/_manifests/sha256/e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(tags(&n).as_str(), "repositories/conformance/repo1/_tags");
        assert_eq!(
            package_index(&n).as_str(),
            "_rd/pkgindex/conformance/repo1/_index.json"
        );
        let id = Uuid::nil();
        assert_eq!(
            upload_state(&id).as_str(),
            "uploads/00000000-0000-0000-0000-000000000000/state"
        );
        let d512 = Digest::of(validator::Algorithm::Sha512, b"");
        assert_eq!(
            parse_blob_key(&blob_data(&d)),
            Some((d.clone(), BlobPart::Data(String::new())))
        );
        assert_eq!(
            parse_blob_key(&blob_data_at(&d, "0123abcd")),
            Some((d.clone(), BlobPart::Data("0123abcd".to_owned())))
        );
        assert!(
            blob_data_at(&d, "0123abcd")
                .as_str()
                .ends_with("/data-0123abcd")
        );
        assert_eq!(
            parse_blob_key(&blob_used(&d)),
            Some((d.clone(), BlobPart::Used(String::new())))
        );
        assert_eq!(
            parse_blob_key(&blob_used_at(&d, "ff")),
            Some((d.clone(), BlobPart::Used("ff".to_owned())))
        );
        assert_eq!(
            parse_blob_key(&Key::new(format!("{}-XYZ", blob_data(&d))).unwrap()),
            None
        );
        assert_eq!(
            parse_blob_key(&blob_tombstone(&d)),
            Some((d.clone(), BlobPart::Tombstone))
        );
        assert_eq!(
            parse_blob_key(&Key::new("blobs/sha256/zz/x/data").unwrap()),
            None
        );
        for (k, part) in [
            (repository_marker(&n), RepoPart::Marker),
            (tags(&n), RepoPart::Tags),
            (
                blob_link(&n, &d),
                RepoPart::BlobLink(d.clone(), String::new()),
            ),
            (
                blob_link_at(&n, &d, "00ff"),
                RepoPart::BlobLink(d.clone(), "00ff".to_owned()),
            ),
            (
                manifest_link(&n, &d),
                RepoPart::ManifestLink(d.clone(), String::new()),
            ),
            (
                manifest_link_at(&n, &d, "0a1b"),
                RepoPart::ManifestLink(d.clone(), "0a1b".to_owned()),
            ),
            (referrers(&n, &d), RepoPart::Referrers(d.clone())),
        ] {
            assert_eq!(parse_repo_key(&k), Some((n.clone(), part)), "{k}");
        }
        assert!(
            blob_data(&d512)
                .as_str()
                .starts_with("blobs/sha512/cf/cf83")
        );
    }
}
