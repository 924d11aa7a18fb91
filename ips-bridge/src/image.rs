//! Installed-image metadata: the `var/pkg` tree that makes `pkg list`, `pkg info` and
//! `pkg verify` work inside an image built from IPS packages (image format version 4).
//!
//! Written: `pkg5.image` (variants, non-default facets, publishers), the `state/installed`
//! and `state/known` catalogs (unsigned, every entry with state INSTALLED), the raw manifests
//! under `publisher/<pub>/pkg/`, license texts under `license/<q(stem)>/`, and the empty
//! standard directories `pkg image-create` makes.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::action::ActionKind;
use crate::catalog::{Catalog, CatalogEntry};
use crate::config::{IniFile, python_list};
use crate::fmri::{Fmri, quote};
use crate::manifest::Manifest;
use crate::variant::ImageFilter;

/// Catalog package states pkg records (`pkgdefs.PKG_STATE_*`).
pub mod state {
    /// Known to the image.
    pub const KNOWN: u64 = 0;
    /// Installed.
    pub const INSTALLED: u64 = 2;
    /// The entry comes from a version 1 catalog.
    pub const V1: u64 = 7;
}

/// Why the metadata could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// A file could not be written.
    #[error("{path}: i/o error")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A package cannot be recorded as given.
    #[error("package {fmri}: {message}")]
    Package {
        /// The package.
        fmri: String,
        /// Why.
        message: String,
    },
    /// Writing a file failed in the repository helpers.
    #[error(transparent)]
    Write(#[from] crate::repo::RepoError),
    /// The license callback failed.
    #[error("package {fmri}: license {license}")]
    License {
        /// The package.
        fmri: String,
        /// The license name.
        license: String,
        /// The callback's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A publisher as the image records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePublisher {
    /// Publisher name.
    pub name: String,
    /// Origin URLs (may point at the build repository).
    pub origins: Vec<String>,
}

/// One installed package: its FMRI (publisher and full version) and raw manifest bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledPackage {
    /// The package FMRI.
    pub fmri: Fmri,
    /// The manifest exactly as published (unfiltered).
    pub manifest: Vec<u8>,
}

/// Writes `var/pkg` metadata for an installed package set. See the module documentation.
#[derive(Debug, Clone)]
pub struct ImageMetadata {
    filter: ImageFilter,
    publishers: Vec<ImagePublisher>,
    packages: Vec<InstalledPackage>,
    install_time: String,
}

impl ImageMetadata {
    /// Metadata for an image with these variants and facets; `install_time` is the catalog
    /// timestamp recorded as `last-install` (fixed for reproducible images; see
    /// [`crate::catalog_time`]).
    pub fn new(filter: ImageFilter, install_time: &str) -> Self {
        Self {
            filter,
            publishers: Vec::new(),
            packages: Vec::new(),
            install_time: install_time.to_owned(),
        }
    }

    /// Configures a publisher (every publisher owning an installed package must be
    /// configured; [`ImageMetadata::write`] adds missing ones without origins).
    pub fn publisher(mut self, name: &str, origins: &[&str]) -> Self {
        self.publishers.push(ImagePublisher {
            name: name.to_owned(),
            origins: origins.iter().map(|s| (*s).to_owned()).collect(),
        });
        self
    }

    /// Records an installed package.
    pub fn package(mut self, fmri: Fmri, manifest: Vec<u8>) -> Self {
        self.packages.push(InstalledPackage { fmri, manifest });
        self
    }

    /// The `pkg5.image` text.
    pub fn pkg5_image(&self) -> String {
        let mut ini = IniFile::new();
        ini.set("image", "version", "4");
        for (k, v) in self.filter.variants() {
            ini.set("variant", k, v);
        }
        for (k, v) in self.filter.facets() {
            ini.set("facet", k, if *v { "True" } else { "False" });
        }
        let names = self.publisher_names();
        ini.set("property", "publisher-search-order", &python_list(&names));
        ini.set("property", "flush-content-cache-on-success", "True");
        for name in &names {
            let origins = self
                .publishers
                .iter()
                .find(|p| &p.name == name)
                .map(|p| p.origins.clone())
                .unwrap_or_default();
            let section = format!("authority_{name}");
            ini.set(&section, "prefix", name);
            ini.set(&section, "origins", &python_list(&origins));
            ini.set(&section, "mirrors", "[]");
            ini.set(&section, "sticky", "True");
            ini.set(&section, "disabled", "False");
        }
        ini.set("CONFIGURATION", "version", "3");
        ini.to_string()
    }

    fn publisher_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.publishers.iter().map(|p| p.name.clone()).collect();
        for p in &self.packages {
            if let Some(name) = p.fmri.publisher()
                && !names.iter().any(|n| n == name)
            {
                names.push(name.to_owned());
            }
        }
        names
    }

    /// Writes `<root>/var/pkg`. `license` is called for every license action of every
    /// package and must write the license's decompressed, verified text (for example with
    /// [`crate::FileRepo::fetch_payload`]). Each file is renamed into place whole but not
    /// synced (see `put_file`).
    pub fn write<F, E>(&self, root: &Path, license: F) -> Result<(), ImageError>
    where
        F: FnMut(&Fmri, &crate::Action, &mut dyn Write) -> Result<(), E>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let mut parsed = Vec::with_capacity(self.packages.len());
        for p in &self.packages {
            let pkg_err = |message: String| ImageError::Package {
                fmri: p.fmri.to_string(),
                message,
            };
            let text = std::str::from_utf8(&p.manifest)
                .map_err(|_| pkg_err("manifest is not utf-8".into()))?;
            parsed.push(Manifest::parse(text).map_err(|e| pkg_err(format!("manifest: {e}")))?);
        }
        self.write_parsed(root, &parsed.iter().collect::<Vec<_>>(), license)
    }

    /// [`ImageMetadata::write`] for a caller that has parsed the manifests already (a builder
    /// parses every one to compose the image): `parsed[i]` must be the parse of the `i`-th
    /// package's manifest bytes, in the order the packages were added (panics when the counts
    /// differ). Saves parsing every manifest a second time.
    pub fn write_parsed<F, E>(
        &self,
        root: &Path,
        parsed: &[&Manifest],
        mut license: F,
    ) -> Result<(), ImageError>
    where
        F: FnMut(&Fmri, &crate::Action, &mut dyn Write) -> Result<(), E>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        assert_eq!(
            parsed.len(),
            self.packages.len(),
            "write_parsed needs one parsed manifest per package"
        );
        let var_pkg = root.join("var/pkg");
        let io_err = |path: &Path| {
            let path = path.to_owned();
            move |source| ImageError::Io { path, source }
        };
        for d in [
            "cache/index",
            "cache/publisher",
            "cache/tmp",
            "gui_cache",
            "history",
            "license",
            "lost+found",
            "publisher",
            "ssl",
            "state/installed",
            "state/known",
        ] {
            let p = var_pkg.join(d);
            fs::create_dir_all(&p).map_err(io_err(&p))?;
        }
        put_file(&var_pkg.join("pkg5.image"), self.pkg5_image().as_bytes())?;

        let mut catalog = Catalog::default();
        let mut seen = BTreeSet::new();
        for (p, manifest) in self.packages.iter().zip(parsed) {
            let fmri_s = p.fmri.to_string();
            let pkg_err = |message: &str| ImageError::Package {
                fmri: fmri_s.clone(),
                message: message.to_owned(),
            };
            let (Some(publisher), Some(dir)) = (p.fmri.publisher(), p.fmri.dir_path()) else {
                return Err(pkg_err("installed packages need a publisher and a version"));
            };
            if !seen.insert(p.fmri.stem().to_owned()) {
                return Err(pkg_err("more than one version of this package"));
            }
            put_file(
                &var_pkg
                    .join("publisher")
                    .join(publisher)
                    .join("pkg")
                    .join(dir),
                &p.manifest,
            )?;
            catalog
                .add(&p.fmri, manifest, &p.manifest)
                .map_err(|e| pkg_err(&e.to_string()))?;
            for a in manifest.by_kind(ActionKind::License) {
                let name = a.key().unwrap_or_default();
                let path = var_pkg
                    .join("license")
                    .join(quote(p.fmri.stem()))
                    .join(format!("license.{}", quote(name)));
                let mut buf = Vec::new();
                license(&p.fmri, a, &mut buf).map_err(|e| ImageError::License {
                    fmri: fmri_s.clone(),
                    license: name.to_owned(),
                    source: e.into(),
                })?;
                put_file(&path, &buf)?;
                set_mode(&path, 0o444).map_err(io_err(&path))?;
            }
        }
        // Mark every entry installed.
        let entries: Vec<CatalogEntry> = catalog.base.entries().to_vec();
        let mut base = crate::catalog::CatalogPart::new("catalog.base.C");
        for mut e in entries {
            e.fields.insert(
                "metadata".into(),
                json!({
                    "states": [state::KNOWN, state::INSTALLED, state::V1],
                    "last-install": self.install_time,
                }),
            );
            base.push(e);
        }
        catalog.base = base;
        catalog.created = Some(self.install_time.clone());
        for dir in ["state/installed", "state/known"] {
            for (name, body) in catalog.files(&self.install_time, false) {
                put_file(&var_pkg.join(dir).join(name), body.as_bytes())?;
            }
        }
        Ok(())
    }
}

/// Writes a file of the image metadata, renamed into place whole but not synced: `var/pkg` is
/// written into a staging root that is read straight back (into a layer, by the builder), where
/// a sync per file only costs time; a caller writing into a live image syncs what it needs.
fn put_file(path: &Path, data: &[u8]) -> Result<(), ImageError> {
    Ok(crate::repo::write_renamed(path, data, false)?)
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> io::Result<()> {
    Ok(())
}

/// The `var/sadm/pkg/<pkg>/pkginfo` text pkg writes for a `legacy` action (install it with
/// mode 0644, in a 0755 directory; pkg also touches `var/sadm/install/contents` when that
/// directory exists).
///
/// Keys, in this order, each only when non-empty: `ARCH` (default: the image's
/// `variant.arch`), `BASEDIR` (`/`), `CATEGORY` (`system`), `DESC`, `HOTLINE`, `NAME` (default:
/// the package's `pkg.summary`, cut to 256 characters), `PKG`, `PKGINST` (default: `pkg`),
/// `PSTAMP`, `SUNW_PRODVERS`, `VENDOR`, `VERSION` (default: the package version); every key
/// takes the action's attribute of the same lower-case name when present. Then `INSTDATE`,
/// formatted `%b %d %Y %H:%M` (pkg uses the local time of the install; here the caller's
/// `install_time`, in UTC).
pub fn legacy_pkginfo(
    action: &crate::Action,
    package: &Fmri,
    summary: &str,
    arch: &str,
    install_time: std::time::SystemTime,
) -> Option<String> {
    let pkg = action
        .get("pkg")
        .filter(|_| action.kind() == ActionKind::Legacy)?;
    let summary: String = summary.chars().take(256).collect();
    let version = package.version().map(|v| v.to_string()).unwrap_or_default();
    let defaults: [(&str, &str); 12] = [
        ("arch", arch),
        ("basedir", "/"),
        ("category", "system"),
        ("desc", ""),
        ("hotline", ""),
        ("name", &summary),
        ("pkg", pkg),
        ("pkginst", pkg),
        ("pstamp", ""),
        ("sunw_prodvers", ""),
        ("vendor", ""),
        ("version", &version),
    ];
    let mut out = String::new();
    for (k, default) in defaults {
        let v = action.get(k).unwrap_or(default);
        if !v.is_empty() {
            out.push_str(&format!("{}={v}\n", k.to_uppercase()));
        }
    }
    let secs = install_time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let stamp =
        crate::catalog::catalog_time(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs));
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month: usize = stamp[4..6].parse().unwrap_or(1);
    out.push_str(&format!(
        "INSTDATE={} {} {} {}:{}\n",
        MONTHS[month - 1],
        &stamp[6..8],
        &stamp[0..4],
        &stamp[9..11],
        &stamp[11..13]
    ));
    Some(out)
}

/// Reads the `metadata.states` of an installed-catalog entry.
pub fn entry_states(entry: &CatalogEntry) -> Vec<u64> {
    entry
        .fields
        .get("metadata")
        .and_then(|m| m.get("states"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}
