//! What `rdctl build --sign-key --attest` attests besides the signature: the build's SPDX SBOM
//! (read back from the layout's SBOM referrer) and an SLSA v1 provenance of the build (image
//! file and lockfile digests, publishers, packages, rdctl's version, SOURCE_DATE_EPOCH). The
//! signing and pushing are `registry_client::publish`'s.

use std::path::Path;

use anyhow::Context as _;
use trust::intoto::{self, Statement};
use validator::Digest;

/// What the provenance names besides the build's summary.
pub struct Provenance<'a> {
    /// The image file.
    pub image_file: &'a Path,
    /// SOURCE_DATE_EPOCH.
    pub source_date_epoch: Option<u64>,
}

/// The statements to attest for a build: its SBOM and its provenance, about the built
/// manifest under `docker_reference`.
pub fn statements(
    s: &Provenance<'_>,
    docker_reference: &str,
    summary: &builder::BuildSummary,
) -> anyhow::Result<Vec<Statement>> {
    Ok(vec![
        Statement::for_image(
            docker_reference,
            &summary.manifest,
            intoto::PREDICATE_SPDX,
            build_sbom(summary)?,
        ),
        Statement::for_image(
            docker_reference,
            &summary.manifest,
            intoto::PREDICATE_SLSA_V1,
            build_provenance(s, summary)?,
        ),
    ])
}

/// The SPDX document of the build's SBOM referrer, read from the layout.
fn build_sbom(summary: &builder::BuildSummary) -> anyhow::Result<serde_json::Value> {
    let layout = validator::ImageLayout::open(&summary.output)
        .with_context(|| format!("cannot open {}", summary.output.display()))?;
    let read = |d: &Digest, limit: u64| -> anyhow::Result<Vec<u8>> {
        let size = std::fs::metadata(layout.blob_path(d))
            .with_context(|| format!("{d} is missing from {}", summary.output.display()))?
            .len();
        Ok(layout.read_document(d, size, limit)?)
    };
    let manifest: serde_json::Value =
        serde_json::from_slice(&read(&summary.sbom, validator::MAX_MANIFEST_SIZE as u64)?)
            .context("the SBOM manifest")?;
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .and_then(|d| Digest::parse(d).ok())
        .context("the SBOM manifest has no layer")?;
    let bytes = read(&layer, registry_client::inspect::MAX_SBOM_SIZE)?;
    serde_json::from_slice(&bytes).context("the SBOM is not JSON")
}

/// The SLSA v1 provenance of the build: image file and lockfile digests, publishers,
/// packages, rdctl's version, SOURCE_DATE_EPOCH.
fn build_provenance(
    s: &Provenance<'_>,
    summary: &builder::BuildSummary,
) -> anyhow::Result<serde_json::Value> {
    let image_bytes = std::fs::read(s.image_file)
        .with_context(|| format!("cannot read {}", s.image_file.display()))?;
    let image_digest = Digest::sha256(&image_bytes);
    let image = builder::ImageFile::load(s.image_file)
        .with_context(|| format!("cannot read {}", s.image_file.display()))?;
    let lock_path = image.lockfile_path();
    let lock_bytes = std::fs::read(&lock_path)
        .with_context(|| format!("cannot read {}", lock_path.display()))?;
    let lock_digest = Digest::sha256(&lock_bytes);
    let lock = builder::Lockfile::load_for(&image)
        .with_context(|| format!("cannot read {}", lock_path.display()))?;
    let publishers: Vec<(&str, &str)> = lock
        .publishers
        .iter()
        .map(|(n, u)| (n.as_str(), u.as_str()))
        .collect();
    let packages: Vec<(&str, Option<&Digest>)> = summary
        .packages
        .iter()
        .map(|p| (p.as_str(), None))
        .collect();
    let image_name = s.image_file.display().to_string();
    let lock_name = lock_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| lock_path.display().to_string());
    let p = trust::slsa::Provenance::for_rdctl_build(&trust::slsa::RdctlBuild {
        image_file: &image_name,
        image_file_digest: &image_digest,
        lockfile: Some((&lock_name, &lock_digest)),
        publishers: &publishers,
        packages: &packages,
        builder_id: "https://reddwarf.invalid/rdctl",
        rdctl_version: env!("CARGO_PKG_VERSION"),
        source_date_epoch: s.source_date_epoch,
        invocation_id: None,
    });
    Ok(p.to_value())
}
