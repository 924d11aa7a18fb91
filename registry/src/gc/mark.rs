//! The mark: what every repository keeps (tags, links, referrers and the manifests they
//! reach), gathered repository by repository into a compact set of kept digests.

use super::*;

/// What a pass carries from the mark to the sweep: the digests some repository keeps, and the
/// link candidates (links their repository does not keep) by digest. Nothing else of the
/// store stays in memory: its keys are read a page at a time.
#[derive(Default)]
pub(super) struct Pass {
    pub(super) kept: KeptDigests,
    pub(super) links: BTreeMap<Digest, Plan>,
}

impl Pass {
    /// Marks the repositories of `batch` (at most [`GcOptions::concurrency`] at once) and
    /// folds each result in as it completes: what it keeps into `kept`, the links it does not
    /// into `links`. A repository's snapshot and marks are dropped once folded in.
    pub(super) async fn mark(
        &mut self,
        store: &dyn Store,
        repos: &Repos,
        opts: &GcOptions,
        lease: Option<&Lease>,
        batch: Vec<(Name, RepoSnapshot)>,
        report: &mut GcReport,
    ) -> Result<(), GcError> {
        // Boxed so the stream's item type names no closure lifetimes (the run is spawned).
        type Marking<'a> =
            crate::storage::BoxFuture<'a, (&'a Name, &'a RepoSnapshot, Result<Marked, GcError>)>;
        let futures: Vec<Marking<'_>> = batch
            .iter()
            .map(|(name, snap)| {
                Box::pin(async move { (name, snap, mark(store, repos, name, snap, opts).await) })
                    as Marking<'_>
            })
            .collect();
        let mut marks =
            futures_util::stream::iter(futures).buffer_unordered(opts.concurrency.max(1));
        while let Some((name, snap, m)) = marks.next().await {
            if let Some(lease) = lease {
                lease.check()?;
            }
            let m = m?;
            report.marked_manifests += m.manifests.len();
            report.marked_blobs += m.blobs.len();
            // A kept link with a key of an epoch (or more than one key) may have one at an
            // epoch that is no longer current: the sweep removes those. A kept link with just
            // the legacy key is not looked at (that would cost a record read per kept digest).
            let epoched =
                |epochs: &Vec<String>| epochs.len() > 1 || epochs.iter().any(|e| !e.is_empty());
            for (d, epochs) in &snap.blob_links {
                let kept = m.blobs.contains(d);
                if kept && !epoched(epochs) {
                    continue;
                }
                let plan = self.links.entry(d.clone()).or_default();
                let links = if kept {
                    &mut plan.kept_blob_links
                } else {
                    &mut plan.blob_links
                };
                links.extend(epochs.iter().map(|e| (name.clone(), e.clone())));
            }
            for (d, epochs) in &snap.manifest_links {
                let kept = m.manifests.contains(d);
                if kept && !epoched(epochs) {
                    continue;
                }
                let plan = self.links.entry(d.clone()).or_default();
                let links = if kept {
                    &mut plan.kept_manifest_links
                } else {
                    &mut plan.manifest_links
                };
                links.extend(epochs.iter().map(|e| (name.clone(), e.clone())));
            }
            for d in m.manifests.iter().chain(m.blobs.iter()) {
                self.kept.insert(d);
            }
        }
        Ok(())
    }
}

/// The set of digests some repository keeps: SHA-256 digests as sorted 32-byte arrays
/// (3.2 MB for 100,000), any other algorithm as parsed digests. Filled during the mark, then
/// sealed (sorted, deduplicated) before the sweep looks anything up.
#[derive(Default)]
pub(super) struct KeptDigests {
    sha256: Vec<[u8; 32]>,
    pub(super) other: BTreeSet<Digest>,
}

impl KeptDigests {
    pub(super) fn insert(&mut self, d: &Digest) {
        match sha256_bytes(d) {
            Some(b) => self.sha256.push(b),
            None => {
                self.other.insert(d.clone());
            }
        }
    }

    pub(super) fn seal(&mut self) {
        self.sha256.sort_unstable();
        self.sha256.dedup();
        self.sha256.shrink_to_fit();
    }

    pub(super) fn contains(&self, d: &Digest) -> bool {
        match sha256_bytes(d) {
            Some(b) => self.sha256.binary_search(&b).is_ok(),
            None => self.other.contains(d),
        }
    }
}

/// The 32 bytes of a SHA-256 digest; `None` for other algorithms.
pub(super) fn sha256_bytes(d: &Digest) -> Option<[u8; 32]> {
    if d.algorithm() != validator::Algorithm::Sha256 {
        return None;
    }
    let hex = d.encoded().as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|v| v as u8);
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        *o = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

/// Marks what repository `name` keeps.
pub(super) async fn mark(
    store: &dyn Store,
    repos: &Repos,
    name: &Name,
    snap: &RepoSnapshot,
    opts: &GcOptions,
) -> Result<Marked, GcError> {
    let fail = |reason: String| GcError::Mark {
        repository: name.to_string(),
        reason,
    };
    let mut queue: VecDeque<Digest> = VecDeque::new();
    if snap.has_tags {
        let tags = repos
            .tag_digests(name)
            .await
            .map_err(|e| fail(format!("cannot read the tag index: {e}")))?;
        queue.extend(tags);
    }
    if !opts.delete_untagged {
        queue.extend(snap.manifest_links.keys().cloned());
    }
    let mut m = Marked::default();
    while let Some(d) = queue.pop_front() {
        if !m.manifests.insert(d.clone()) {
            continue;
        }
        let bytes = match crate::tombstone::get_data(store, &d, MANIFEST_LIMIT).await {
            Ok(doc) => doc.bytes,
            Err(e) if e.is_not_found() => {
                return Err(fail(format!("the bytes of kept manifest {d} are missing")));
            }
            Err(e) => return Err(e.into()),
        };
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| fail(format!("kept manifest {d} is not JSON: {e}")))?;
        let digest_of = |desc: &Value, field: &str| -> Result<Digest, GcError> {
            desc.get("digest")
                .and_then(Value::as_str)
                .and_then(|s| Digest::parse(s).ok())
                .ok_or_else(|| fail(format!("manifest {d}: {field} has no valid digest")))
        };
        if let Some(children) = v.get("manifests").and_then(Value::as_array) {
            for (i, c) in children.iter().enumerate() {
                queue.push_back(digest_of(c, &format!("manifests[{i}]"))?);
            }
        }
        if let Some(config) = v.get("config") {
            m.blobs.insert(digest_of(config, "config")?);
        }
        for field in ["layers", "blobs"] {
            if let Some(list) = v.get(field).and_then(Value::as_array) {
                for (i, l) in list.iter().enumerate() {
                    m.blobs.insert(digest_of(l, &format!("{field}[{i}]"))?);
                }
            }
        }
        if opts.keep_referrers && snap.referrers.contains(&d) {
            match store.get(&layout::referrers(name, &d), INDEX_LIMIT).await {
                Ok(doc) => {
                    let v: Value = serde_json::from_slice(&doc.bytes)
                        .map_err(|e| fail(format!("referrers of {d} are not JSON: {e}")))?;
                    for (i, r) in v
                        .get("manifests")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .enumerate()
                    {
                        queue.push_back(digest_of(r, &format!("referrers[{i}]"))?);
                    }
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(m)
}
