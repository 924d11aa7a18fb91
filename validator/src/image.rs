//! Whole-image validation: walk an image layout from `index.json` through nested indexes,
//! manifests and configs down to every layer, checking each document's rules, every blob's size
//! and digest, every layer's DiffID, platforms against configs, and nesting depth and cycles.

use std::collections::{HashMap, HashSet};

use crate::digest::Digest;
use crate::document::{
    Descriptor, Document, DocumentKind, Index, MAX_CONFIG_SIZE, MAX_MANIFEST_SIZE, check_config,
    check_document,
};
use crate::layer::{LayerLimits, check_layer};
use crate::layout::{ImageLayout, LayoutError};
use crate::platform::Platform;
use crate::report::{Report, Rule};
use crate::verify::VerifyError;

/// What to check.
#[derive(Debug, Clone)]
pub struct ValidateOptions {
    /// Decompress and parse every layer and check its DiffID (otherwise only presence and size).
    pub deep: bool,
    /// Require at least one image for this platform.
    pub platform: Option<Platform>,
    /// Deepest nesting of indexes below `index.json`.
    pub max_index_depth: usize,
    /// Layer limits.
    pub limits: LayerLimits,
    /// Layers whose DiffID the caller computed itself from the uncompressed stream as it
    /// wrote (or checked) the blob, by blob digest. With `deep`, such a layer is not
    /// decompressed again: its blob is still read back and checked against its digest and
    /// size, and the config's DiffID must equal the one given here. A builder validating
    /// its own output uses this to skip a second gunzip of every layer it just compressed;
    /// `rdctl validate` leaves it empty and decompresses everything.
    pub known_diff_ids: HashMap<Digest, Digest>,
    /// Blobs the caller itself wrote into the layout in this process, hashing the bytes as
    /// they went into the file (the layout's blob writer names a blob by that digest). With
    /// `deep`, such a blob is checked for presence and size from its file metadata instead of
    /// being read back and hashed a second time; everything else about it (media type, the
    /// DiffID against `known_diff_ids`, the documents that point at it) is checked as usual.
    /// `rdctl validate` leaves it empty: a layout from elsewhere is always read back.
    pub written_blobs: HashSet<Digest>,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        ValidateOptions {
            deep: true,
            platform: None,
            max_index_depth: 8,
            limits: LayerLimits::default(),
            known_diff_ids: HashMap::new(),
            written_blobs: HashSet::new(),
        }
    }
}

/// One layer of a checked image.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LayerInfo {
    /// The compressed blob.
    pub digest: Digest,
    /// The DiffID from the config.
    pub diff_id: Option<Digest>,
    /// The ChainID of this layer and all below it.
    pub chain_id: Option<Digest>,
}

/// One image (manifest + config) found in the walk.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ImageInfo {
    /// The manifest digest.
    pub manifest: Digest,
    /// The reference name from `index.json`, when there is one.
    pub ref_name: Option<String>,
    /// The platform from the config.
    pub platform: Option<Platform>,
    /// The config digest.
    pub config: Digest,
    /// `config.StopSignal`.
    pub stop_signal: Option<String>,
    /// Layers, base first.
    pub layers: Vec<LayerInfo>,
}

/// The result of validating a layout.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LayoutReport {
    /// Every finding.
    pub report: Report,
    /// The images reached.
    pub images: Vec<ImageInfo>,
}

/// ChainIDs for a stack of DiffIDs: `ChainID(L0) = DiffID(L0)`,
/// `ChainID(L0..n) = sha256(ChainID(L0..n-1) + " " + DiffID(Ln))`.
pub fn chain_ids(diff_ids: &[Digest]) -> Vec<Digest> {
    let mut out: Vec<Digest> = Vec::with_capacity(diff_ids.len());
    for d in diff_ids {
        let next = match out.last() {
            None => d.clone(),
            Some(prev) => Digest::sha256(format!("{prev} {d}").as_bytes()),
        };
        out.push(next);
    }
    out
}

/// Validates the image layout, optionally only the entries of `index.json` whose
/// `org.opencontainers.image.ref.name` is `reference`.
pub fn validate_layout(
    layout: &ImageLayout,
    reference: Option<&str>,
    opts: &ValidateOptions,
) -> LayoutReport {
    let (mut w, index) = match Walker::open(layout, opts) {
        Ok(v) => v,
        Err(report) => return report,
    };
    let entries: Vec<&Descriptor> = match reference {
        None => index.manifests.iter().collect(),
        Some(name) => index
            .manifests
            .iter()
            .filter(|d| d.ref_name() == Some(name))
            .collect(),
    };
    if index.manifests.is_empty() {
        w.out.report.warn(
            Rule::LayoutEmpty,
            "index.json",
            "the layout holds no image (its index.json lists no manifest): nothing was checked",
        );
    }
    if let Some(name) = reference
        && entries.is_empty()
    {
        let known: Vec<&str> = index
            .manifests
            .iter()
            .filter_map(Descriptor::ref_name)
            .collect();
        w.out.report.error(
            Rule::RefNotFound,
            "index.json",
            format!(
                "no manifest has ref.name {name:?} (known: {})",
                known.join(", ")
            ),
        );
    }
    for (i, d) in entries.into_iter().enumerate() {
        let ref_name = d.ref_name().map(str::to_owned);
        w.visit(
            d,
            0,
            &mut Vec::new(),
            &format!("index.json $.manifests[{i}]"),
            ref_name.as_deref(),
        );
    }
    w.require_platform();
    w.out
}

/// Validates the one manifest or index of the layout named by `digest` (`oci:DIR@DIGEST`): an
/// `index.json` entry, or a manifest or index an entry's index lists (one platform of an
/// image). `index.json` is checked as by [`validate_layout`]; a digest found in neither place
/// is a `ref-not-found` error.
pub fn validate_layout_manifest(
    layout: &ImageLayout,
    digest: &Digest,
    opts: &ValidateOptions,
) -> LayoutReport {
    let (mut w, index) = match Walker::open(layout, opts) {
        Ok(v) => v,
        Err(report) => return report,
    };
    if let Some((i, d)) = index
        .manifests
        .iter()
        .enumerate()
        .find(|(_, d)| d.digest == *digest)
    {
        let ref_name = d.ref_name().map(str::to_owned);
        w.visit(
            d,
            0,
            &mut Vec::new(),
            &format!("index.json $.manifests[{i}]"),
            ref_name.as_deref(),
        );
        w.require_platform();
        return w.out;
    }
    for top in index.manifests.iter().filter(|d| d.media_type.is_index()) {
        let Ok(bytes) = layout.read_document(&top.digest, top.size, MAX_MANIFEST_SIZE as u64)
        else {
            continue;
        };
        let (_, doc) = check_document(&bytes, Some(DocumentKind::Index), None, "");
        let Some(Document::Index(inner)) = doc else {
            continue;
        };
        if let Some((j, d)) = inner
            .manifests
            .iter()
            .enumerate()
            .find(|(_, d)| d.digest == *digest)
        {
            w.visit(
                d,
                1,
                &mut vec![top.digest.clone()],
                &format!("index {} $.manifests[{j}]", top.digest),
                None,
            );
            w.require_platform();
            return w.out;
        }
    }
    w.out.report.error(
        Rule::RefNotFound,
        "index.json",
        format!("no manifest or index {digest} in index.json or in the indexes it lists"),
    );
    w.out
}

struct Walker<'a> {
    layout: &'a ImageLayout,
    opts: &'a ValidateOptions,
    out: LayoutReport,
    /// Layers already checked: digest → computed DiffID.
    layers_seen: HashMap<Digest, Option<Digest>>,
}

impl<'a> Walker<'a> {
    /// Starts a walk: reads and checks the layout's `index.json`. `Err` is the finished report
    /// when there is no index to walk (unreadable, or not a valid index).
    fn open(
        layout: &'a ImageLayout,
        opts: &'a ValidateOptions,
    ) -> Result<(Self, Box<Index>), LayoutReport> {
        let mut w = Walker {
            layout,
            opts,
            out: LayoutReport::default(),
            layers_seen: HashMap::new(),
        };
        let bytes = match layout.read_index_bytes() {
            Ok(b) => b,
            Err(e) => {
                w.out
                    .report
                    .error(Rule::LayoutVersion, "index.json", e.to_string());
                return Err(w.out);
            }
        };
        let (r, doc) = check_document(&bytes, Some(DocumentKind::Index), None, "index.json");
        w.out.report.extend(r);
        match doc {
            Some(Document::Index(index)) => Ok((w, index)),
            _ => Err(w.out),
        }
    }
}

fn layout_rule(e: &LayoutError) -> Rule {
    match e {
        LayoutError::BlobMissing { .. } => Rule::BlobMissing,
        LayoutError::TooLarge { .. } => Rule::DocumentSize,
        LayoutError::Verify {
            source: VerifyError::DigestMismatch { .. },
            ..
        } => Rule::BlobDigest,
        LayoutError::Verify { .. } => Rule::BlobSize,
        _ => Rule::BlobMissing,
    }
}

impl Walker<'_> {
    /// With [`ValidateOptions::platform`]: an error unless an image walked has that platform.
    fn require_platform(&mut self) {
        if let Some(want) = &self.opts.platform
            && !self
                .out
                .images
                .iter()
                .any(|img| img.platform.as_ref().is_some_and(|p| want.matches(p)))
        {
            self.out.report.error(
                Rule::PlatformMissing,
                "layout",
                format!("no image for platform {want}"),
            );
        }
    }

    fn read_doc(&mut self, d: &Descriptor, limit: usize, loc: &str) -> Option<Vec<u8>> {
        if let Some(data) = &d.data {
            return Some(data.clone());
        }
        match self.layout.read_document(&d.digest, d.size, limit as u64) {
            Ok(b) => Some(b),
            Err(e) => {
                self.out.report.error(layout_rule(&e), loc, format!("{e}"));
                None
            }
        }
    }

    fn visit(
        &mut self,
        d: &Descriptor,
        depth: usize,
        stack: &mut Vec<Digest>,
        from: &str,
        ref_name: Option<&str>,
    ) {
        let loc = format!("{} {}", kind_word(d), d.digest);
        if d.media_type.is_index() {
            if stack.contains(&d.digest) {
                self.out.report.error(
                    Rule::IndexCycle,
                    from,
                    format!("index {} refers back to itself", d.digest),
                );
                return;
            }
            if depth >= self.opts.max_index_depth {
                self.out.report.error(
                    Rule::IndexDepth,
                    from,
                    format!("indexes nested deeper than {}", self.opts.max_index_depth),
                );
                return;
            }
            let Some(bytes) = self.read_doc(d, MAX_MANIFEST_SIZE, &loc) else {
                return;
            };
            let (r, doc) =
                check_document(&bytes, Some(DocumentKind::Index), Some(&d.media_type), &loc);
            self.out.report.extend(r);
            let Some(Document::Index(index)) = doc else {
                return;
            };
            stack.push(d.digest.clone());
            for (i, child) in index.manifests.iter().enumerate() {
                self.visit(
                    child,
                    depth + 1,
                    stack,
                    &format!("{loc} $.manifests[{i}]"),
                    ref_name,
                );
            }
            stack.pop();
        } else if d.media_type.is_manifest() {
            let Some(bytes) = self.read_doc(d, MAX_MANIFEST_SIZE, &loc) else {
                return;
            };
            let (r, doc) = check_document(
                &bytes,
                Some(DocumentKind::Manifest),
                Some(&d.media_type),
                &loc,
            );
            self.out.report.extend(r);
            if let Some(Document::Manifest(m)) = doc {
                self.manifest(d, &m, &loc, ref_name);
            }
        } else {
            // Not a document we know: check its bytes only.
            self.blob(d, &loc);
        }
    }

    fn manifest(
        &mut self,
        d: &Descriptor,
        m: &crate::document::Manifest,
        loc: &str,
        ref_name: Option<&str>,
    ) {
        let payload_manifest = !m.layers.is_empty()
            && m.layers
                .iter()
                .all(|l| crate::document::PAYLOAD_LAYER_TYPES.contains(&l.media_type.as_str()));
        if !m.config.media_type.is_image_config() || payload_manifest {
            // An artifact (or a cosign or BuildKit signature or attestation manifest, whose
            // image config only records its payloads): its blobs are opaque, check their bytes.
            self.blob(&m.config, &format!("{loc} config"));
            for (i, l) in m.layers.iter().enumerate() {
                self.blob(l, &format!("{loc} $.layers[{i}]"));
            }
            return;
        }
        let cloc = format!("config {}", m.config.digest);
        let Some(cbytes) = self.read_doc(&m.config, MAX_CONFIG_SIZE, &cloc) else {
            return;
        };
        let (r, cfg) = check_config(&cbytes, Some(m.layers.len()), &cloc);
        self.out.report.extend(r);
        let Some(cfg) = cfg else {
            // Still check the layers' bytes so every problem shows at once.
            for (i, l) in m.layers.iter().enumerate() {
                self.layer(l, None, &format!("{loc} $.layers[{i}] ({})", l.digest));
            }
            return;
        };
        if let Some(p) = &d.platform {
            let c = &cfg.platform;
            let os_ok = p.os == c.os;
            if !os_ok
                || p.architecture != c.architecture
                || p.variant != c.variant
                || (p.os_version.is_some() && p.os_version != c.os_version)
                || (!p.os_features.is_empty() && p.os_features != c.os_features)
            {
                self.out.report.error(
                    Rule::PlatformMismatch,
                    loc,
                    format!("index entry says platform {p}, the config says {c}"),
                );
            }
        }
        let chains = chain_ids(&cfg.diff_ids);
        let mut layers = Vec::new();
        for (i, l) in m.layers.iter().enumerate() {
            let diff_id = cfg.diff_ids.get(i);
            self.layer(l, diff_id, &format!("{loc} $.layers[{i}] ({})", l.digest));
            layers.push(LayerInfo {
                digest: l.digest.clone(),
                diff_id: diff_id.cloned(),
                chain_id: chains.get(i).cloned(),
            });
        }
        self.out.images.push(ImageInfo {
            manifest: d.digest.clone(),
            ref_name: ref_name.map(str::to_owned),
            platform: Some(cfg.platform.clone()),
            config: m.config.digest.clone(),
            stop_signal: cfg.stop_signal.clone(),
            layers,
        });
    }

    fn layer(&mut self, l: &Descriptor, diff_id: Option<&Digest>, loc: &str) {
        if !self.layout.has_blob(&l.digest)
            && l.media_type.is_non_distributable()
            && !l.urls.is_empty()
        {
            self.out.report.warn(Rule::BlobMissing, loc, "non-distributable layer is not in the layout and its urls are never followed; it cannot be checked");
            return;
        }
        if !self.opts.deep {
            self.present(l, loc);
            return;
        }
        if let Some(computed) = self.layers_seen.get(&l.digest).cloned() {
            // Checked already (shared by several manifests): compare its DiffID only.
            if let (Some(c), Some(want)) = (computed, diff_id)
                && &c != want
            {
                self.out.report.error(
                    Rule::DiffId,
                    loc,
                    format!("uncompressed digest {c} differs from diff_id {want}"),
                );
            }
            return;
        }
        if let Some(known) = self.opts.known_diff_ids.get(&l.digest) {
            // The caller hashed the uncompressed stream itself: check the blob's bytes and
            // compare DiffIDs, without a second decompression.
            self.blob(l, loc);
            if let Some(want) = diff_id
                && known != want
            {
                self.out.report.error(
                    Rule::DiffId,
                    loc,
                    format!("uncompressed digest {known} differs from diff_id {want}"),
                );
            }
            self.layers_seen
                .insert(l.digest.clone(), Some(known.clone()));
            return;
        }
        let blob = match self.layout.open_blob(&l.digest, l.size) {
            Ok(b) => b,
            Err(e) => {
                self.out.report.error(layout_rule(&e), loc, e.to_string());
                return;
            }
        };
        let summary = check_layer(
            blob,
            l,
            diff_id,
            &self.opts.limits,
            loc,
            &mut self.out.report,
        );
        self.layers_seen.insert(l.digest.clone(), summary.diff_id);
    }

    /// Presence and size from file metadata only.
    fn present(&mut self, d: &Descriptor, loc: &str) {
        match std::fs::metadata(self.layout.blob_path(&d.digest)) {
            Ok(m) if m.len() == d.size => {}
            Ok(m) => self.out.report.error(
                Rule::BlobSize,
                loc,
                format!(
                    "blob {} is {} bytes, descriptor says {}",
                    d.digest,
                    m.len(),
                    d.size
                ),
            ),
            Err(_) => self.out.report.error(
                Rule::BlobMissing,
                loc,
                format!("blob {} is not in the layout", d.digest),
            ),
        }
    }

    /// Size and digest of an opaque blob.
    fn blob(&mut self, d: &Descriptor, loc: &str) {
        if d.data.is_some() {
            return;
        }
        if !self.opts.deep || self.opts.written_blobs.contains(&d.digest) {
            self.present(d, loc);
            return;
        }
        match self.layout.open_blob(&d.digest, d.size) {
            Ok(mut r) => {
                if let Err(e) = std::io::copy(&mut r, &mut std::io::sink()) {
                    let rule = match VerifyError::from_io(&e) {
                        Some(VerifyError::DigestMismatch { .. }) => Rule::BlobDigest,
                        Some(_) => Rule::BlobSize,
                        None => Rule::BlobMissing,
                    };
                    self.out.report.error(rule, loc, e.to_string());
                }
            }
            Err(e) => self.out.report.error(layout_rule(&e), loc, e.to_string()),
        }
    }
}

fn kind_word(d: &Descriptor) -> &'static str {
    if d.media_type.is_index() {
        "index"
    } else if d.media_type.is_manifest() {
        "manifest"
    } else {
        "blob"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_ids_follow_the_spec() {
        let a = Digest::sha256(b"a");
        let b = Digest::sha256(b"b");
        let c = chain_ids(&[a.clone(), b.clone()]);
        assert_eq!(c[0], a);
        assert_eq!(c[1], Digest::sha256(format!("{a} {b}").as_bytes()));
        assert!(chain_ids(&[]).is_empty());
    }
}
