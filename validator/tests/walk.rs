//! Whole-layout validation: layouts written with `ImageLayout`, then broken one way each.

use std::io::Write;

use serde_json::{Value, json};
use validator::{Algorithm, Digest, ImageLayout, Platform, Rule, ValidateOptions, validate_layout};

struct Built {
    _dir: tempfile::TempDir,
    layout: ImageLayout,
    manifest: Digest,
    manifest_size: u64,
    layer: Digest,
    diff_id: Digest,
}

fn tar_with(name: &str, body: &[u8]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_ustar();
    h.set_size(body.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, name, body).unwrap();
    b.into_inner().unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn put(layout: &ImageLayout, v: &Value) -> (Digest, u64) {
    let bytes = serde_json::to_vec(v).unwrap();
    (layout.write_document(&bytes).unwrap(), bytes.len() as u64)
}

/// A one-layer illumos image; `tweak_config` and `tweak_manifest` break it.
fn build(tweak_config: impl FnOnce(&mut Value), tweak_manifest: impl FnOnce(&mut Value)) -> Built {
    build_with_layer(
        tar_with("etc/motd", b"hello\n"),
        tweak_config,
        tweak_manifest,
    )
}

/// [`build`] with the given uncompressed layer (gzipped here).
fn build_with_layer(
    tar: Vec<u8>,
    tweak_config: impl FnOnce(&mut Value),
    tweak_manifest: impl FnOnce(&mut Value),
) -> Built {
    let dir = tempfile::tempdir().unwrap();
    let layout = ImageLayout::create(dir.path().join("img")).unwrap();
    let blob = gzip(&tar);
    let (layer, layer_size) = layout
        .write_blob(&blob[..], Algorithm::Sha256, None)
        .unwrap();
    let mut config = json!({
        "architecture": "amd64", "os": "illumos",
        "config": {"Cmd": ["/usr/bin/true"], "StopSignal": "SIGPWR"},
        "rootfs": {"type": "layers", "diff_ids": [Digest::sha256(&tar).to_string()]}
    });
    tweak_config(&mut config);
    let (cfg, cfg_size) = put(&layout, &config);
    let mut manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg.to_string(), "size": cfg_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer.to_string(), "size": layer_size}]
    });
    tweak_manifest(&mut manifest);
    let (m, m_size) = put(&layout, &manifest);
    set_index(
        &layout,
        vec![json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": m.to_string(), "size": m_size,
            "platform": {"os": "illumos", "architecture": "amd64"},
            "annotations": {"org.opencontainers.image.ref.name": "1.0"}
        })],
    );
    Built {
        _dir: dir,
        layout,
        manifest: m,
        manifest_size: m_size,
        layer,
        diff_id: Digest::sha256(&tar),
    }
}

fn set_index(layout: &ImageLayout, manifests: Vec<Value>) {
    let idx = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests});
    layout
        .write_index_bytes(&serde_json::to_vec(&idx).unwrap())
        .unwrap();
}

fn check(b: &Built) -> validator::LayoutReport {
    validate_layout(&b.layout, None, &ValidateOptions::default())
}

#[test]
fn a_good_image_passes_with_its_stop_signal_and_chain_ids() {
    let b = build(|_| {}, |_| {});
    let out = check(&b);
    assert!(out.report.violations.is_empty(), "{}", out.report);
    assert_eq!(out.images.len(), 1);
    let img = &out.images[0];
    assert_eq!(img.stop_signal.as_deref(), Some("SIGPWR"));
    assert_eq!(img.ref_name.as_deref(), Some("1.0"));
    assert_eq!(img.layers[0].chain_id, img.layers[0].diff_id);
    let want = ValidateOptions {
        platform: Platform::parse("illumos/amd64"),
        ..Default::default()
    };
    assert!(
        validate_layout(&b.layout, Some("1.0"), &want)
            .report
            .is_ok()
    );
}

#[test]
fn tag_and_platform_selection() {
    let b = build(|_| {}, |_| {});
    let out = validate_layout(&b.layout, Some("2.0"), &ValidateOptions::default());
    assert!(out.report.has(Rule::RefNotFound), "{}", out.report);
    let want = ValidateOptions {
        platform: Platform::parse("illumos/arm64"),
        ..Default::default()
    };
    let out = validate_layout(&b.layout, None, &want);
    assert!(out.report.has(Rule::PlatformMissing), "{}", out.report);
}

#[test]
fn diff_ids_must_match_count_and_content() {
    let b = build(|c| c["rootfs"]["diff_ids"] = json!([]), |_| {});
    assert!(check(&b).report.has(Rule::DiffIdsCount));
    let b = build(
        |c| c["rootfs"]["diff_ids"][0] = json!(Digest::sha256(b"x").to_string()),
        |_| {},
    );
    assert!(check(&b).report.has(Rule::DiffId));
}

#[test]
fn config_platform_must_match_the_index() {
    let b = build(|c| c["os"] = json!("linux"), |_| {});
    assert!(check(&b).report.has(Rule::PlatformMismatch));
}

#[test]
fn blobs_missing_tampered_or_resized() {
    let b = build(|_| {}, |_| {});
    std::fs::remove_file(b.layout.blob_path(&b.layer)).unwrap();
    assert!(check(&b).report.has(Rule::BlobMissing));
    let b = build(|_| {}, |_| {});
    let p = b.layout.blob_path(&b.layer);
    let mut bytes = std::fs::read(&p).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&p, &bytes).unwrap();
    assert!(check(&b).report.has(Rule::BlobDigest));
    bytes.push(0);
    std::fs::write(&p, &bytes).unwrap();
    assert!(check(&b).report.has(Rule::BlobSize));
    // --fast notices the size from metadata alone.
    let fast = ValidateOptions {
        deep: false,
        ..Default::default()
    };
    assert!(
        validate_layout(&b.layout, None, &fast)
            .report
            .has(Rule::BlobSize)
    );
}

#[test]
fn known_diff_ids_skip_decompression_but_not_the_blob_or_diff_id_checks() {
    // Not a tar: a deep check that decompresses and parses the layer refuses it.
    let b = build_with_layer(b"not a tar archive".to_vec(), |_| {}, |_| {});
    assert!(!check(&b).report.is_ok(), "the layer is parsed by default");
    let known = |diff_id: &Digest| ValidateOptions {
        known_diff_ids: [(b.layer.clone(), diff_id.clone())].into(),
        ..Default::default()
    };
    // The caller vouches for the DiffID it computed: no decompression, so no tar errors.
    let out = validate_layout(&b.layout, None, &known(&b.diff_id));
    assert!(out.report.is_ok(), "{}", out.report);
    assert_eq!(
        out.images[0].layers[0].diff_id.as_ref(),
        Some(&b.diff_id),
        "the config's DiffID is reported"
    );
    // A config DiffID other than the computed one is still an error.
    let out = validate_layout(&b.layout, None, &known(&Digest::sha256(b"other")));
    assert!(out.report.has(Rule::DiffId), "{}", out.report);
    // The blob is still read back against its digest.
    let p = b.layout.blob_path(&b.layer);
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&p, &bytes).unwrap();
    let out = validate_layout(&b.layout, None, &known(&b.diff_id));
    assert!(out.report.has(Rule::BlobDigest), "{}", out.report);
}

#[test]
fn written_blobs_are_checked_for_size_but_not_read_back() {
    let b = build(|_| {}, |_| {});
    let opts = ValidateOptions {
        known_diff_ids: [(b.layer.clone(), b.diff_id.clone())].into(),
        written_blobs: [b.layer.clone()].into(),
        ..Default::default()
    };
    assert!(validate_layout(&b.layout, None, &opts).report.is_ok());
    // Same length, other bytes: the caller vouched for what it wrote, so only a fresh
    // validation (as `rdctl validate` runs) reads the blob back and sees it.
    let p = b.layout.blob_path(&b.layer);
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&p, &bytes).unwrap();
    let out = validate_layout(&b.layout, None, &opts);
    assert!(out.report.is_ok(), "{}", out.report);
    assert!(check(&b).report.has(Rule::BlobDigest));
    // A size other than the descriptor's is still an error.
    bytes.push(0);
    std::fs::write(&p, &bytes).unwrap();
    let out = validate_layout(&b.layout, None, &opts);
    assert!(out.report.has(Rule::BlobSize), "{}", out.report);
    // So is a missing blob.
    std::fs::remove_file(&p).unwrap();
    let out = validate_layout(&b.layout, None, &opts);
    assert!(out.report.has(Rule::BlobMissing), "{}", out.report);
}

#[test]
fn stop_signal_by_number_is_refused_in_a_layout() {
    let b = build(|c| c["config"]["StopSignal"] = json!("15"), |_| {});
    assert!(check(&b).report.has(Rule::StopSignal));
}

#[test]
fn nested_indexes_cycles_and_depth() {
    let b = build(|_| {}, |_| {});
    let leaf = json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": b.manifest.to_string(), "size": b.manifest_size});
    // Depth: index → index → … → manifest, nine levels.
    let mut child = leaf.clone();
    for _ in 0..9 {
        let (d, s) = put(
            &b.layout,
            &json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [child]}),
        );
        child = json!({"mediaType": "application/vnd.oci.image.index.v1+json", "digest": d.to_string(), "size": s});
    }
    set_index(&b.layout, vec![child]);
    assert!(check(&b).report.has(Rule::IndexDepth));
    // Two levels are fine.
    let (d, s) = put(
        &b.layout,
        &json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [leaf]}),
    );
    set_index(
        &b.layout,
        vec![
            json!({"mediaType": "application/vnd.oci.image.index.v1+json", "digest": d.to_string(), "size": s}),
        ],
    );
    let out = check(&b);
    assert!(out.report.is_ok(), "{}", out.report);
    assert_eq!(out.images.len(), 1);
}

#[test]
fn a_self_referencing_index_cannot_verify() {
    // A content-addressed index cannot name its own digest; a layout can still hold a blob
    // whose file name lies. The walk must stop at the digest check (cycle detection stays as
    // defence in depth behind it).
    let b = build(|_| {}, |_| {});
    let fake = Digest::sha256(b"cycle");
    let body = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": fake.to_string(), "size": 0}]});
    let bytes = serde_json::to_vec(&body).unwrap();
    std::fs::write(b.layout.blob_path(&fake), &bytes).unwrap();
    set_index(
        &b.layout,
        vec![
            json!({"mediaType": "application/vnd.oci.image.index.v1+json", "digest": fake.to_string(), "size": bytes.len()}),
        ],
    );
    let out = check(&b);
    // The blob does not hash to its name, so the walk stops at the digest check.
    assert!(out.report.has(Rule::BlobDigest), "{}", out.report);
    assert!(!out.report.is_ok());
}

#[test]
fn artifacts_are_checked_as_opaque_blobs() {
    let b = build(|_| {}, |_| {});
    let sbom = b"{\"spdxVersion\":\"SPDX-2.3\"}";
    let d = b.layout.write_document(sbom).unwrap();
    let (a, s) = put(
        &b.layout,
        &json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": "application/spdx+json",
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": validator::EMPTY_DIGEST, "size": 2, "data": "e30="},
            "layers": [{"mediaType": "application/spdx+json", "digest": d.to_string(), "size": sbom.len()}],
            "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": b.manifest.to_string(), "size": b.manifest_size}
        }),
    );
    set_index(
        &b.layout,
        vec![
            json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": a.to_string(), "size": s}),
        ],
    );
    let out = check(&b);
    assert!(out.report.is_ok(), "{}", out.report);
    std::fs::write(b.layout.blob_path(&d), b"{\"spdxVersion\":\"SPDX-2.4\"}").unwrap();
    assert!(check(&b).report.has(Rule::BlobDigest));
}

#[test]
fn an_empty_layout_is_a_warning_not_a_silent_pass() {
    let dir = tempfile::tempdir().unwrap();
    let layout = ImageLayout::create(dir.path().join("empty")).unwrap();
    let out = validate_layout(&layout, None, &ValidateOptions::default());
    assert!(out.report.has(Rule::LayoutEmpty), "{}", out.report);
    assert!(
        out.report.is_ok(),
        "a warning, not an error: {}",
        out.report
    );
    assert!(out.images.is_empty());
    let out = validate_layout(&layout, Some("1.0"), &ValidateOptions::default());
    assert!(out.report.has(Rule::RefNotFound), "{}", out.report);
}
