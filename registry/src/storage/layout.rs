//! Every key the registry stores, and the only code that builds them.
//!
//! ```text
//! blobs/<alg>/<hex[0..2]>/<hex>/data          blob bytes (layers, configs and manifests), one copy
//!                                              for the whole registry; written only by committing
//!                                              a verified staging area or a verified document
//! repositories/<name>/_repo                    marker: the repository exists (created on first push)
//! repositories/<name>/_blobs/<alg>/<hex>       link: the repository may serve this blob (JSON
//!                                              {"size"})
//! repositories/<name>/_manifests/<alg>/<hex>   link: the manifest is in the repository (JSON
//!                                              {"mediaType","size","subject"?,"artifactType"?})
//! repositories/<name>/_tags                    index document: {"tags":{tag: digest}}, replaced
//!                                              with a conditional write
//! repositories/<name>/_referrers/<alg>/<hex>   index document: the descriptors of manifests in the
//!                                              repository whose subject is this digest
//! blobs/<alg>/<hex[0..2]>/<hex>/used          hold record: rewritten by every request that
//!                                              starts relying on existing content (garbage
//!                                              collection's write barrier, see `gc`)
//! blobs/<alg>/<hex[0..2]>/<hex>/gc            tombstone: a collector is deciding about this
//!                                              digest; requests wait until it is gone
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

/// The hold record of a digest, rewritten by requests that start relying on its content.
pub fn blob_used(d: &Digest) -> Key {
    blob_data(d)
        .as_str()
        .strip_suffix("/data")
        .map(|dir| key(format!("{dir}/used")))
        .expect("blob keys end in /data")
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobPart {
    /// The bytes ([`blob_data`]).
    Data,
    /// The hold record ([`blob_used`]).
    Used,
    /// A collector's tombstone ([`blob_tombstone`]).
    Tombstone,
}

/// Parses a key under [`blobs_root`] back into its digest and part; `None` for anything else.
pub fn parse_blob_key(k: &Key) -> Option<(Digest, BlobPart)> {
    let parts: Vec<&str> = k.as_str().split('/').collect();
    let ["blobs", alg, _, hex, last] = parts.as_slice() else {
        return None;
    };
    let part = match *last {
        "data" => BlobPart::Data,
        "used" => BlobPart::Used,
        "gc" => BlobPart::Tombstone,
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
    /// [`blob_link`] of this digest.
    BlobLink(Digest),
    /// [`manifest_link`] of this digest.
    ManifestLink(Digest),
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
        ["_blobs", alg, hex] => RepoPart::BlobLink(digest(alg, hex)?),
        ["_manifests", alg, hex] => RepoPart::ManifestLink(digest(alg, hex)?),
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

/// Link: the manifest belongs to the repository.
pub fn manifest_link(name: &Name, d: &Digest) -> Key {
    key(format!(
        "repositories/{name}/_manifests/{}/{}",
        d.algorithm(),
        d.encoded()
    ))
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
            Some((d.clone(), BlobPart::Data))
        );
        assert_eq!(
            parse_blob_key(&blob_used(&d)),
            Some((d.clone(), BlobPart::Used))
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
            (blob_link(&n, &d), RepoPart::BlobLink(d.clone())),
            (manifest_link(&n, &d), RepoPart::ManifestLink(d.clone())),
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
