//! The image file: a TOML description of an image built from IPS packages.
//!
//! ```toml
//! name = "registry.example.org/zones/web"   # optional: the repository pushes go to
//! tags = ["1.0", "latest"]
//! platform = "illumos/amd64"
//! os_version = "2026.04"                     # optional
//!
//! [publishers]
//! "example.org" = "repo"                      # a file repository (relative to this file)
//! "omnios" = "https://pkg.omnios.org/r151054/core/"   # or a depot URL
//!
//! [packages]
//! include = ["web/server", "pkg://example.org/shell/bash@5.2"]
//! manifests = ["group.p5m"]   # depend actions (require, incorporate) name more packages
//!
//! [variants]                   # defaults: variant.arch=i386, variant.opensolaris.zone=nonglobal
//! "variant.debug.osnet" = "false"
//! [facets]
//! "facet.doc.man" = false
//!
//! [config]
//! entrypoint = ["/usr/bin/server"]
//! cmd = ["--port", "80"]
//! env = { PATH = "/usr/bin:/usr/sbin" }
//! working_dir = "/"
//! user = "webservd"
//! stop_signal = "SIGTERM"
//! stop_timeout = 30
//! labels = { "org.example.team" = "web" }
//! exposed_ports = ["80/tcp"]
//! volumes = ["/var/www"]
//!
//! [annotations]
//! "org.opencontainers.image.source" = "https://example.org/zones"
//!
//! [layering]
//! strategy = "single"          # or "per-package", or "budget" with budget = N layers
//!
//! [compression]
//! algorithm = "gzip"           # or "zstd"
//! level = 6
//!
//! [signatures]                 # pkg's signature-policy; "ignore" when absent
//! policy = "require-signatures"  # or "verify", "ignore"
//! trust_anchors = "trust"      # directory of PEM CA certificates (relative to this file)
//! ```
//!
//! Every error names the file, and the line and field when there is one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ips_bridge::{Fmri, ImageFilter, Manifest, SignaturePolicy};
use serde::Deserialize;
use validator::Platform;

/// Why an image file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageFileError {
    /// The file could not be read.
    #[error("{path}: cannot read image file")]
    Io {
        /// The image file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not have the image file's shape.
    #[error("{path}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Syntax {
        /// The image file.
        path: PathBuf,
        /// 1-based line, when known.
        line: Option<usize>,
        /// What the parser said.
        message: String,
    },
    /// A field has a value the builder cannot use.
    #[error("{path}{}: {field}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Field {
        /// The image file.
        path: PathBuf,
        /// 1-based line of the field, when known.
        line: Option<usize>,
        /// Dotted field path, e.g. `config.stop_signal`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A manifest file named in `packages.manifests` could not be read or parsed.
    #[error("{path}: packages.manifests: {manifest}")]
    Manifest {
        /// The image file.
        path: PathBuf,
        /// The manifest file.
        manifest: PathBuf,
        /// The read or parse error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Where a publisher's packages come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A version 4 file repository (absolute path).
    Path(PathBuf),
    /// A depot server (`http://` or `https://`).
    Url(String),
}

impl Origin {
    /// The origin as recorded in the lockfile and in the image's `pkg5.image`.
    pub fn as_string(&self) -> String {
        match self {
            Origin::Path(p) => p.display().to_string(),
            Origin::Url(u) => u.clone(),
        }
    }
}

/// How packages are spread over layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layering {
    /// Everything in one layer.
    Single,
    /// One layer per package, plus a top layer for what the build generates (accounts,
    /// `var/pkg`).
    PerPackage,
    /// At most N layers: the largest packages get a layer each, the others share one, and
    /// what the build generates is the top layer. Which packages get their own layer
    /// depends only on their sizes and names, so a rebuild with the same packages gives
    /// the same layers, and an unchanged package keeps its layer digest.
    Budget(u32),
}

/// The most layers a budget may ask for (containerd and the Linux overlay driver handle
/// about 127 lower directories).
const MAX_LAYERS: i64 = 127;

/// Layer compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionAlg {
    /// gzip (level 0–9).
    Gzip,
    /// zstd (level 1–19).
    Zstd,
}

/// Layer compression and its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compression {
    /// The algorithm.
    pub algorithm: CompressionAlg,
    /// The level.
    pub level: i32,
}

/// How package signatures are checked (`[signatures]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Signatures {
    /// pkg's `signature-policy`.
    pub policy: SignaturePolicy,
    /// The trust anchor directory (absolute); required unless the policy is `ignore`.
    pub trust_anchors: Option<PathBuf>,
}

/// The image config part of an image file (OCI `config` fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `Env`, as `KEY=VALUE` sorted by key.
    pub env: BTreeMap<String, String>,
    /// `WorkingDir`.
    pub working_dir: Option<String>,
    /// `User`.
    pub user: Option<String>,
    /// `StopSignal` (a name such as `SIGTERM`).
    pub stop_signal: Option<String>,
    /// Seconds between the stop signal and a forced stop.
    pub stop_timeout: Option<u32>,
    /// `Labels`.
    pub labels: BTreeMap<String, String>,
    /// `ExposedPorts`.
    pub exposed_ports: Vec<String>,
    /// `Volumes`.
    pub volumes: Vec<String>,
}

/// A parsed and checked image file.
#[derive(Debug, Clone)]
pub struct ImageFile {
    /// The file it was read from.
    pub path: PathBuf,
    /// The exact bytes read (the lockfile's checksum covers them).
    pub bytes: Vec<u8>,
    /// Repository name for pushes, when given.
    pub name: Option<String>,
    /// Tags (`latest` when none are given).
    pub tags: Vec<String>,
    /// Target platform.
    pub platform: Platform,
    /// Publishers by name, in name order.
    pub publishers: BTreeMap<String, Origin>,
    /// Publishers' origins exactly as written (relative paths stay relative, so the
    /// lockfile does not depend on where the image file lives).
    pub origins_written: BTreeMap<String, String>,
    /// Packages named directly.
    pub include: Vec<Fmri>,
    /// Manifest files whose depend actions name packages: path and exact bytes.
    pub manifests: Vec<(PathBuf, Vec<u8>)>,
    /// `variant.*` values (defaults applied).
    pub variants: BTreeMap<String, String>,
    /// `facet.*` values.
    pub facets: BTreeMap<String, bool>,
    /// Image config.
    pub config: RuntimeConfig,
    /// Manifest annotations.
    pub annotations: BTreeMap<String, String>,
    /// Layering strategy.
    pub layering: Layering,
    /// Layer compression.
    pub compression: Compression,
    /// Package signature checks.
    pub signatures: Signatures,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    platform: Option<String>,
    os_version: Option<String>,
    #[serde(default)]
    publishers: BTreeMap<String, String>,
    #[serde(default)]
    packages: RawPackages,
    #[serde(default)]
    variants: BTreeMap<String, String>,
    #[serde(default)]
    facets: BTreeMap<String, bool>,
    #[serde(default)]
    config: RawConfig,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    layering: RawLayering,
    #[serde(default)]
    compression: RawCompression,
    #[serde(default)]
    signatures: RawSignatures,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPackages {
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    manifests: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    entrypoint: Vec<String>,
    #[serde(default)]
    cmd: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    working_dir: Option<String>,
    user: Option<String>,
    stop_signal: Option<String>,
    stop_timeout: Option<u32>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    exposed_ports: Vec<String>,
    #[serde(default)]
    volumes: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLayering {
    strategy: Option<String>,
    budget: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCompression {
    algorithm: Option<String>,
    level: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSignatures {
    policy: Option<String>,
    trust_anchors: Option<String>,
}

/// `[signatures]`: the policy, and the trust anchor directory it needs (from the image file's
/// directory).
fn check_signatures(
    raw: &RawSignatures,
    base: &Path,
    fe: &FieldErrors<'_>,
) -> Result<Signatures, ImageFileError> {
    let policy = match &raw.policy {
        None => SignaturePolicy::Ignore,
        Some(p) => p.parse().map_err(|m| fe.at(&["signatures", "policy"], m))?,
    };
    let trust_anchors = raw.trust_anchors.as_ref().map(|d| {
        let p = base.join(d);
        std::path::absolute(&p).unwrap_or(p)
    });
    if policy != SignaturePolicy::Ignore && trust_anchors.is_none() {
        return Err(fe.at(
            &["signatures", "policy"],
            format!(
                "{policy} needs trust_anchors = \"DIR\", a directory of the PEM CA certificates \
                 signatures must lead to"
            ),
        ));
    }
    Ok(Signatures {
        policy,
        trust_anchors,
    })
}

/// What keys of the image file mean, in the words its errors use.
const HINTS: config_toml::Hints<'static> = &[
    ("config.stop_timeout", "seconds, a whole number such as 30"),
    (
        "layering.budget",
        "the most layers, a whole number such as 8",
    ),
    ("compression.level", "a whole number: gzip 1-9, zstd 1-19"),
    ("tags", "an array of strings such as [\"1.0\", \"latest\"]"),
    (
        "config.entrypoint",
        "an array of strings such as [\"/usr/bin/tool\"]",
    ),
    ("config.cmd", "an array of strings"),
    (
        "config.env",
        "a table of strings such as { PATH = \"/usr/bin\" }",
    ),
];

/// Names a field of the image file in errors, with the line it is on.
struct FieldErrors<'t> {
    path: &'t Path,
    text: &'t str,
}

impl FieldErrors<'_> {
    fn at(&self, fpath: &[&str], message: String) -> ImageFileError {
        ImageFileError::Field {
            path: self.path.to_owned(),
            line: config_toml::line_of(self.text, &fpath.join(".")),
            field: fpath.join("."),
            message,
        }
    }
}

/// `platform` and `os_version`: an illumos platform.
fn check_platform(raw: &Raw, fe: &FieldErrors<'_>) -> Result<Platform, ImageFileError> {
    let field = |p: &[&str], m: String| fe.at(p, m);
    let mut platform = match &raw.platform {
        None => Platform::illumos_amd64(),
        Some(p) => Platform::parse(p)
            .ok_or_else(|| field(&["platform"], format!("{p:?} is not os/arch[/variant]")))?,
    };
    platform.os_version = raw.os_version.clone();
    if platform.os != "illumos" {
        return Err(field(
            &["platform"],
            format!("os {:?}: images are built for illumos zones", platform.os),
        ));
    }
    Ok(platform)
}

/// `name` and `tags` (`latest` when none are given).
fn check_tags(raw: &Raw, fe: &FieldErrors<'_>) -> Result<Vec<String>, ImageFileError> {
    let field = |p: &[&str], m: String| fe.at(p, m);
    if let Some(name) = &raw.name
        && (name.is_empty() || name.contains(char::is_whitespace))
    {
        return Err(field(
            &["name"],
            format!("{name:?} is not a repository name"),
        ));
    }
    for (i, t) in raw.tags.iter().enumerate() {
        if !valid_tag(t) {
            return Err(field(
                &["tags", &i.to_string()],
                format!("{t:?} is not a valid tag ([A-Za-z0-9_][A-Za-z0-9._-]{{0,127}})"),
            ));
        }
    }
    let tags = if raw.tags.is_empty() {
        vec!["latest".to_owned()]
    } else {
        raw.tags.clone()
    };
    Ok(tags)
}

/// `[publishers]`: names and origins, relative paths taken from the image file's directory.
fn check_publishers(
    raw: &Raw,
    base: &Path,
    fe: &FieldErrors<'_>,
) -> Result<BTreeMap<String, Origin>, ImageFileError> {
    let field = |p: &[&str], m: String| fe.at(p, m);
    let mut publishers = BTreeMap::new();
    for (name, origin) in &raw.publishers {
        if !ips_bridge::valid_publisher(name) {
            return Err(field(
                &["publishers", name],
                format!("{name:?} is not a valid publisher name"),
            ));
        }
        let o = if origin.starts_with("http://") || origin.starts_with("https://") {
            Origin::Url(origin.clone())
        } else if let Some(p) = origin.strip_prefix("file://") {
            Origin::Path(PathBuf::from(p))
        } else if origin.is_empty() {
            return Err(field(&["publishers", name], "empty origin".into()));
        } else {
            let p = base.join(origin);
            Origin::Path(std::path::absolute(&p).unwrap_or(p))
        };
        publishers.insert(name.clone(), o);
    }
    if publishers.is_empty() {
        return Err(field(
            &["publishers"],
            "no publishers: name at least one".into(),
        ));
    }
    Ok(publishers)
}

/// Manifest files named by the image file: each path with the bytes read from it.
type ManifestFiles = Vec<(PathBuf, Vec<u8>)>;

/// `[packages]`: the FMRIs to include and the manifest files, each read and parsed.
fn check_packages(
    raw: &Raw,
    path: &Path,
    base: &Path,
    publishers: &BTreeMap<String, Origin>,
    fe: &FieldErrors<'_>,
) -> Result<(Vec<Fmri>, ManifestFiles), ImageFileError> {
    let field = |p: &[&str], m: String| fe.at(p, m);
    let mut include = Vec::new();
    for (i, s) in raw.packages.include.iter().enumerate() {
        let f = Fmri::parse(s)
            .map_err(|e| field(&["packages", "include", &i.to_string()], e.to_string()))?;
        if let Some(p) = f.publisher()
            && !publishers.contains_key(p)
        {
            return Err(field(
                &["packages", "include", &i.to_string()],
                format!("publisher {p} is not listed under [publishers]"),
            ));
        }
        include.push(f);
    }
    let mut manifests = Vec::new();
    for m in &raw.packages.manifests {
        let mpath = base.join(m);
        let mbytes = std::fs::read(&mpath).map_err(|e| ImageFileError::Manifest {
            path: path.to_owned(),
            manifest: mpath.clone(),
            source: Box::new(e),
        })?;
        Manifest::parse_bytes(&mbytes).map_err(|e| ImageFileError::Manifest {
            path: path.to_owned(),
            manifest: mpath.clone(),
            source: Box::new(e),
        })?;
        manifests.push((mpath, mbytes));
    }
    if include.is_empty() && manifests.is_empty() {
        return Err(field(
            &["packages"],
            "no packages: give packages.include or packages.manifests".into(),
        ));
    }
    Ok((include, manifests))
}

/// `[variants]` over the defaults, and `[facets]` names.
fn check_variants(
    raw: &Raw,
    fe: &FieldErrors<'_>,
) -> Result<BTreeMap<String, String>, ImageFileError> {
    let field = |p: &[&str], m: String| fe.at(p, m);
    let mut variants: BTreeMap<String, String> = [
        ("variant.arch", "i386"),
        ("variant.opensolaris.zone", "nonglobal"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    for (k, v) in &raw.variants {
        if !k.starts_with("variant.") {
            return Err(field(
                &["variants", k],
                "variant names start with \"variant.\"".into(),
            ));
        }
        variants.insert(k.clone(), v.clone());
    }
    for k in raw.facets.keys() {
        if !k.starts_with("facet.") {
            return Err(field(
                &["facets", k],
                "facet names start with \"facet.\"".into(),
            ));
        }
    }
    Ok(variants)
}

/// `[config]`: the runtime config, each value checked as the validator checks it.
fn check_runtime_config(
    c: &RawConfig,
    fe: &FieldErrors<'_>,
) -> Result<RuntimeConfig, ImageFileError> {
    let field = |p: &[&str], m: String| fe.at(p, m);
    if let Some(s) = &c.stop_signal {
        validator::check_stop_signal(s).map_err(|m| field(&["config", "stop_signal"], m))?;
    }
    if let Some(w) = &c.working_dir {
        validator::check_working_dir(w).map_err(|m| field(&["config", "working_dir"], m))?;
    }
    if let Some(u) = &c.user {
        validator::check_user(u).map_err(|m| field(&["config", "user"], m))?;
    }
    for k in c.env.keys() {
        if k.is_empty() || k.contains('=') {
            return Err(field(
                &["config", "env", k],
                format!("{k:?} is not an environment variable name"),
            ));
        }
    }
    for (i, p) in c.exposed_ports.iter().enumerate() {
        if !valid_port(p) {
            return Err(field(
                &["config", "exposed_ports", &i.to_string()],
                format!("{p:?} is not PORT[/tcp|/udp|/sctp]"),
            ));
        }
    }
    for (i, v) in c.volumes.iter().enumerate() {
        if !v.starts_with('/') {
            return Err(field(
                &["config", "volumes", &i.to_string()],
                format!("{v:?} is not absolute"),
            ));
        }
    }
    Ok(RuntimeConfig {
        entrypoint: c.entrypoint.clone(),
        cmd: c.cmd.clone(),
        env: c.env.clone(),
        working_dir: c.working_dir.clone(),
        user: c.user.clone(),
        stop_signal: c.stop_signal.clone(),
        stop_timeout: c.stop_timeout,
        labels: c.labels.clone(),
        exposed_ports: c.exposed_ports.clone(),
        volumes: c.volumes.clone(),
    })
}

/// `[layering]`: the strategy and its budget.
fn check_layering(l: &RawLayering, fe: &FieldErrors<'_>) -> Result<Layering, ImageFileError> {
    let field = |p: &[&str], m: String| fe.at(p, m);
    let layering = match l.strategy.as_deref() {
        None | Some("single") => Layering::Single,
        Some("per-package") => Layering::PerPackage,
        Some("budget") => match l.budget {
            Some(n) if (2..=MAX_LAYERS).contains(&n) => Layering::Budget(n as u32),
            Some(n) => {
                return Err(field(
                    &["layering", "budget"],
                    format!("{n}: expected a number of layers from 2 to {MAX_LAYERS}"),
                ));
            }
            None => {
                return Err(field(
                    &["layering", "budget"],
                    "strategy \"budget\" needs budget = N (the number of layers)".into(),
                ));
            }
        },
        Some(s) => {
            return Err(field(
                &["layering", "strategy"],
                format!("{s:?}: expected \"single\", \"per-package\" or \"budget\""),
            ));
        }
    };
    if l.budget.is_some() && !matches!(layering, Layering::Budget(_)) {
        return Err(field(
            &["layering", "budget"],
            "only used with strategy = \"budget\"".into(),
        ));
    }
    Ok(layering)
}

/// `[compression]`: the algorithm and a level within its range.
fn check_compression(
    c: &RawCompression,
    fe: &FieldErrors<'_>,
) -> Result<(CompressionAlg, i64), ImageFileError> {
    let field = |p: &[&str], m: String| fe.at(p, m);
    let algorithm = match c.algorithm.as_deref() {
        None | Some("gzip") => CompressionAlg::Gzip,
        Some("zstd") => CompressionAlg::Zstd,
        Some(s) => {
            return Err(field(
                &["compression", "algorithm"],
                format!("{s:?}: expected \"gzip\" or \"zstd\""),
            ));
        }
    };
    let (lo, hi, default) = match algorithm {
        CompressionAlg::Gzip => (0, 9, 6),
        CompressionAlg::Zstd => (1, 19, 3),
    };
    let level = c.level.unwrap_or(default);
    if !(lo..=hi).contains(&level) {
        return Err(field(
            &["compression", "level"],
            format!("{level} is outside {lo}..={hi}"),
        ));
    }
    Ok((algorithm, level))
}

impl ImageFile {
    /// Reads and checks an image file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ImageFileError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| ImageFileError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, bytes)
    }

    /// Parses image file `bytes` read from `path` (relative repository paths and manifest
    /// files are taken from `path`'s directory).
    pub fn parse(path: &Path, bytes: Vec<u8>) -> Result<Self, ImageFileError> {
        let text = std::str::from_utf8(&bytes).map_err(|e| ImageFileError::Syntax {
            path: path.to_owned(),
            line: Some(config_toml::line_at(
                &String::from_utf8_lossy(&bytes[..e.valid_up_to()]),
                e.valid_up_to(),
            )),
            message: "not UTF-8".into(),
        })?;
        let raw: Raw = config_toml::from_str(text, HINTS).map_err(|e| match e.key {
            Some(field) => ImageFileError::Field {
                path: path.to_owned(),
                line: e.line,
                field,
                message: e.message,
            },
            None => ImageFileError::Syntax {
                path: path.to_owned(),
                line: e.line,
                message: e.message,
            },
        })?;
        let fe = FieldErrors { path, text };
        let field = |p: &[&str], m: String| fe.at(p, m);
        let base = path.parent().unwrap_or(Path::new("."));
        let base = if base.as_os_str().is_empty() {
            Path::new(".")
        } else {
            base
        };
        let platform = check_platform(&raw, &fe)?;
        let tags = check_tags(&raw, &fe)?;
        let publishers = check_publishers(&raw, base, &fe)?;
        let (include, manifests) = check_packages(&raw, path, base, &publishers, &fe)?;
        let variants = check_variants(&raw, &fe)?;
        let config = check_runtime_config(&raw.config, &fe)?;
        for k in raw.annotations.keys() {
            if k.is_empty() {
                return Err(field(&["annotations"], "empty annotation key".into()));
            }
        }

        let layering = check_layering(&raw.layering, &fe)?;
        let (algorithm, level) = check_compression(&raw.compression, &fe)?;
        let signatures = check_signatures(&raw.signatures, base, &fe)?;

        Ok(ImageFile {
            path: path.to_owned(),
            bytes: bytes.clone(),
            name: raw.name,
            tags,
            platform,
            publishers,
            origins_written: raw.publishers.clone(),
            include,
            manifests,
            variants,
            facets: raw.facets,
            config,
            annotations: raw.annotations,
            layering,
            compression: Compression {
                algorithm,
                level: level as i32,
            },
            signatures,
        })
    }

    /// The variant and facet filter pkg would apply in this image.
    pub fn filter(&self) -> ImageFilter {
        let mut f = ImageFilter::new();
        for (k, v) in &self.variants {
            f = f.variant(k, v);
        }
        for (k, v) in &self.facets {
            f = f.facet(k, *v);
        }
        f
    }

    /// Where the lockfile of this image file lives: beside it, `<stem>.lock.json`.
    pub fn lockfile_path(&self) -> PathBuf {
        lockfile_path(&self.path)
    }
}

/// The lockfile path for an image file path.
pub fn lockfile_path(image_file: &Path) -> PathBuf {
    let stem = image_file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "image".into());
    image_file.with_file_name(format!("{stem}.lock.json"))
}

fn valid_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

fn valid_port(p: &str) -> bool {
    let (port, proto) = p.split_once('/').unwrap_or((p, "tcp"));
    matches!(proto, "tcp" | "udp" | "sctp") && port.parse::<u16>().is_ok_and(|n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ImageFile, ImageFileError> {
        ImageFile::parse(Path::new("/x/image.toml"), text.as_bytes().to_vec())
    }

    const MIN: &str =
        "[publishers]\n\"example.org\" = \"repo\"\n[packages]\ninclude = [\"demo/tool\"]\n";

    #[test]
    fn minimal_file_gets_defaults() {
        let f = parse(MIN).unwrap();
        assert_eq!(f.tags, ["latest"]);
        assert_eq!(f.platform, Platform::illumos_amd64());
        assert_eq!(f.variants["variant.arch"], "i386");
        assert_eq!(f.variants["variant.opensolaris.zone"], "nonglobal");
        assert_eq!(
            f.publishers["example.org"],
            Origin::Path(PathBuf::from("/x/repo"))
        );
        assert_eq!(f.include[0].stem(), "demo/tool");
        assert_eq!(f.layering, Layering::Single);
        assert_eq!(
            f.compression,
            Compression {
                algorithm: CompressionAlg::Gzip,
                level: 6
            }
        );
        assert_eq!(f.lockfile_path(), PathBuf::from("/x/image.lock.json"));
    }

    #[test]
    fn signatures_default_to_ignore_and_other_policies_need_trust_anchors() {
        assert_eq!(parse(MIN).unwrap().signatures, Signatures::default());
        let f = parse(&format!(
            "{MIN}[signatures]\npolicy = \"require-signatures\"\ntrust_anchors = \"ca\"\n"
        ))
        .unwrap();
        assert_eq!(
            f.signatures,
            Signatures {
                policy: SignaturePolicy::RequireSignatures,
                trust_anchors: Some(PathBuf::from("/x/ca")),
            }
        );
        let e = parse(&format!("{MIN}[signatures]\npolicy = \"verify\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("/x/image.toml:6: signatures.policy: verify needs trust_anchors"),
            "{e}"
        );
        let e = parse(&format!("{MIN}[signatures]\npolicy = \"require-names\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("signatures.policy: \"require-names\" is not supported"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = parse(&format!(
            "{MIN}[config]\ncmd = [\"a\"]\nstop_signal = \"15\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "/x/image.toml:7: config.stop_signal: \"15\" is a signal number; use a name such as SIGTERM (numbers differ between illumos and Linux)"
        );
        let e = parse(&format!("{MIN}tags = [\"ok\", \"-bad\"]\n"))
            .unwrap_err()
            .to_string();
        // Keys after a table header belong to the table: this is a syntax (shape) error.
        assert!(e.starts_with("/x/image.toml:"), "{e}");
        let e = parse(&format!("tags = [\"ok\", \"-bad\"]\n{MIN}"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/x/image.toml:1: tags.1: \"-bad\""), "{e}");
        let e = parse(&format!("{MIN}[config]\nentrypont = [\"x\"]\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "/x/image.toml:6: config.entrypont: unknown key `entrypont`; the keys here are `entrypoint`, "
            ),
            "{e}"
        );
        // A value of the wrong type names the dotted key and what is expected in user words.
        let e = parse(&format!("{MIN}[config]\nstop_timeout = \"25s\"\n"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "/x/image.toml:6: config.stop_timeout: expected a whole number (0 or more), found the string \"25s\" (seconds, a whole number such as 30)"
        );
        let e = parse("[publishers]\n\"example.org\" = 5\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "/x/image.toml:2: publishers.example.org: expected a string in quotes, found the number 5"
        );
        let e = parse(
            "[publishers]\n\"example.org\" = \"r\"\n[packages]\ninclude = [\"demo/tool@1.x\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("/x/image.toml:4: packages.include.0: "),
            "{e}"
        );
        let e = parse(&format!(
            "{MIN}[compression]\nalgorithm = \"zstd\"\nlevel = 22\n"
        ))
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "/x/image.toml:7: compression.level: 22 is outside 1..=19"
        );
        let e = parse(&format!(
            "{MIN}[config]\nexposed_ports = [\"80/tcp\", \"http\"]\n"
        ))
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "/x/image.toml:6: config.exposed_ports.1: \"http\" is not PORT[/tcp|/udp|/sctp]"
        );
        let e = parse("platform = \"linux/amd64\"\n[publishers]\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "/x/image.toml:1: platform: os \"linux\": images are built for illumos zones"
        );
        let e = parse("[publishers]\n[packages]\ninclude=[\"a\"]\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "/x/image.toml:1: publishers: no publishers: name at least one"
        );
    }

    #[test]
    fn full_config_parses() {
        let f = parse(&format!(
            "name = \"localhost:5000/zones/web\"\ntags = [\"1.0\"]\nplatform = \"illumos/amd64\"\nos_version = \"2026.04\"\n{MIN}\
             [variants]\n\"variant.debug.osnet\" = \"true\"\n[facets]\n\"facet.doc.man\" = false\n\
             [config]\nentrypoint = [\"/usr/bin/tool\"]\nenv = {{ PATH = \"/usr/bin\" }}\nworking_dir = \"/\"\n\
             user = \"demo\"\nstop_signal = \"SIGRTMIN+3\"\nstop_timeout = 45\nvolumes = [\"/data\"]\n\
             [annotations]\n\"org.example.a\" = \"b\"\n[layering]\nstrategy = \"per-package\"\n\
             [compression]\nalgorithm = \"zstd\"\nlevel = 9\n"
        ))
        .unwrap();
        assert_eq!(f.name.as_deref(), Some("localhost:5000/zones/web"));
        assert_eq!(f.platform.os_version.as_deref(), Some("2026.04"));
        assert_eq!(f.variants["variant.debug.osnet"], "true");
        assert!(!f.facets["facet.doc.man"]);
        assert_eq!(f.config.stop_signal.as_deref(), Some("SIGRTMIN+3"));
        assert_eq!(f.config.stop_timeout, Some(45));
        assert_eq!(f.layering, Layering::PerPackage);
        assert_eq!(f.compression.algorithm, CompressionAlg::Zstd);
        assert!(
            !f.filter().allows(
                &ips_bridge::Action::parse("file path=a variant.debug.osnet=false").unwrap()
            )
        );
    }
}
