//! The zone manifests directory: one `*.toml` per zone, read into [`ZoneSpec`]s. A broken
//! manifest, or a zone named by two files, is an error beside the good zones, never a reason to
//! stop the others.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use registry_client::Reference;
use serde::Deserialize;

use super::{ConfigError, read_toml, valid_name};
use crate::volume::{check_volume_name, check_volume_path};
use crate::zone::{
    DEFAULT_UPDATE_TIMEOUT, MIN_NCPUS, MIN_PHYSICAL, ProbeCheck, PullPolicy, ReadinessProbe,
    Reclaim, ResourceLimits, Rollout, VolumeSpec, ZoneSpec, size_bytes,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileZone {
    name: String,
    image: String,
    pull_policy: Option<PullPolicy>,
    brand: Option<String>,
    stop_timeout_secs: Option<u32>,
    #[serde(default)]
    limits: ResourceLimits,
    #[serde(default)]
    volumes: Vec<VolumeSpec>,
    #[serde(default)]
    reclaim: Reclaim,
    update_timeout: Option<config_toml::HumanDuration>,
    readiness: Option<FileReadiness>,
}

/// `[readiness]` as written: `port` and `path` (HTTP) or `port` alone (TCP).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileReadiness {
    port: u16,
    path: Option<String>,
    host: Option<String>,
    period: Option<config_toml::HumanDuration>,
}

/// A zone manifest that could not be used; the other zones go on.
#[derive(Debug)]
pub struct ZoneLoadError {
    /// The zone name when it could be read, else the file stem.
    pub zone: String,
    /// Why.
    pub error: ConfigError,
}

/// Reads every `*.toml` in `dir`, sorted by file name. Broken manifests, and zones named by
/// more than one file, come back as errors beside the good ones.
pub fn load_zones(dir: &Path) -> Result<(Vec<ZoneSpec>, Vec<ZoneLoadError>), ConfigError> {
    let read_err = |source| ConfigError::Read {
        path: dir.to_owned(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        .collect();
    files.sort();
    let mut good: BTreeMap<String, ZoneSpec> = BTreeMap::new();
    let mut bad = Vec::new();
    let mut dup = Vec::new();
    for path in files {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        match load_zone(&path) {
            Ok(z) => {
                if let Some(first) = good.get(&z.name) {
                    dup.push(ZoneLoadError {
                        zone: z.name.clone(),
                        error: ConfigError::Value {
                            path: path.clone(),
                            field: "name",
                            reason: format!(
                                "zone {:?} is also defined by {}",
                                z.name,
                                first.source.display()
                            ),
                        },
                    });
                } else {
                    good.insert(z.name.clone(), z);
                }
            }
            Err(error) => bad.push(ZoneLoadError { zone: stem, error }),
        }
    }
    // A zone defined twice is ambiguous: neither definition is used.
    for d in &dup {
        good.remove(&d.zone);
    }
    bad.extend(dup);
    Ok((good.into_values().collect(), bad))
}

/// Reads one zone manifest.
pub fn load_zone(path: &Path) -> Result<ZoneSpec, ConfigError> {
    let f: FileZone = read_toml(path)?;
    let value = |field, reason: String| ConfigError::Value {
        path: path.to_owned(),
        field,
        reason,
    };
    if !valid_name(&f.name) || f.name == "global" {
        return Err(value(
            "name",
            format!("{:?} is not a valid zone name", f.name),
        ));
    }
    let image = Reference::parse(&f.image).map_err(|e| value("image", e.to_string()))?;
    let brand = f.brand.unwrap_or_else(|| "nlipkg".into());
    if !valid_name(&brand) {
        return Err(value(
            "brand",
            format!("{brand:?} is not a valid brand name"),
        ));
    }
    if let Some(c) = f.limits.cpus
        && !(c > 0.0 && c <= 1024.0)
    {
        return Err(value("limits.cpus", format!("{c} is not in (0, 1024]")));
    }
    // zonecfg's own minimums, refused here (naming the file) rather than by zonecfg when
    // the zone is made.
    if let Some(c) = f.limits.cpus
        && c < MIN_NCPUS
    {
        return Err(value(
            "limits.cpus",
            format!("{c} is below {MIN_NCPUS}, the least capped-cpu ncpus zonecfg takes"),
        ));
    }
    if let Some(m) = &f.limits.memory {
        match size_bytes(m) {
            None => {
                return Err(value(
                    "limits.memory",
                    format!("{m:?} is not a size like 512m or 2g"),
                ));
            }
            Some(b) if b < MIN_PHYSICAL => {
                return Err(value(
                    "limits.memory",
                    format!("{m:?} is below 1M, the least capped-memory physical zonecfg takes"),
                ));
            }
            Some(_) => {}
        }
    }
    if let Some(d) = &f.limits.disk
        && size_bytes(d).is_none_or(|b| b == 0)
    {
        return Err(value(
            "limits.disk",
            format!("{d:?} is not a size like 512m or 10G"),
        ));
    }
    check_volumes(path, &f.volumes)?;
    let rollout = rollout(f.update_timeout, f.readiness).map_err(|(k, r)| value(k, r))?;
    Ok(ZoneSpec {
        name: f.name,
        image,
        pull_policy: f.pull_policy.unwrap_or(PullPolicy::IfNotPresent),
        brand,
        stop_timeout_secs: f.stop_timeout_secs,
        limits: f.limits,
        volumes: f.volumes,
        reclaim: f.reclaim,
        rollout,
        source: path.to_owned(),
    })
}

/// `update_timeout` (more than zero) and `[readiness]`: a port above zero, an absolute path, a
/// host that is an IP address (the probe resolves no names), a period above zero.
fn rollout(
    timeout: Option<config_toml::HumanDuration>,
    readiness: Option<FileReadiness>,
) -> Result<Rollout, (&'static str, String)> {
    let update_timeout = timeout.map_or(DEFAULT_UPDATE_TIMEOUT, Into::into);
    if update_timeout.is_zero() {
        return Err(("update_timeout", "must be more than 0s".to_owned()));
    }
    let readiness = match readiness {
        None => None,
        Some(r) => {
            if r.port == 0 {
                return Err(("readiness.port", "must be from 1 to 65535".to_owned()));
            }
            let host = r.host.unwrap_or_else(|| "127.0.0.1".to_owned());
            if host.parse::<std::net::IpAddr>().is_err() {
                return Err((
                    "readiness.host",
                    format!("{host:?} is not an IP address such as 127.0.0.1"),
                ));
            }
            let check = match r.path {
                None => ProbeCheck::Tcp,
                Some(p)
                    if p.starts_with('/')
                        && !p.chars().any(|c| c.is_whitespace() || c.is_control()) =>
                {
                    ProbeCheck::Http { path: p }
                }
                Some(p) => {
                    return Err((
                        "readiness.path",
                        format!("{p:?} is not an absolute request path such as /healthz"),
                    ));
                }
            };
            let period = r
                .period
                .map_or(std::time::Duration::from_secs(1), Into::into);
            if period.is_zero() {
                return Err(("readiness.period", "must be more than 0s".to_owned()));
            }
            Some(ReadinessProbe {
                host,
                port: r.port,
                check,
                period,
            })
        }
    };
    Ok(Rollout {
        update_timeout,
        readiness,
    })
}

/// `[[volumes]]`: each path absolute and normalised, each size a size, each name a volume
/// name; no path or name twice.
fn check_volumes(path: &Path, volumes: &[VolumeSpec]) -> Result<(), ConfigError> {
    let value = |field: String, reason: String| ConfigError::Element {
        path: path.to_owned(),
        field,
        reason,
    };
    for (i, v) in volumes.iter().enumerate() {
        check_volume_path(&v.path).map_err(|r| value(format!("volumes.{i}.path"), r))?;
        if let Some(s) = &v.size
            && size_bytes(s).is_none_or(|b| b == 0)
        {
            return Err(value(
                format!("volumes.{i}.size"),
                format!("{s:?} is not a size like 512m or 10G"),
            ));
        }
        if let Some(n) = &v.name {
            check_volume_name(n).map_err(|r| value(format!("volumes.{i}.name"), r))?;
        }
        if let Some(j) = volumes[..i].iter().position(|o| o.path == v.path) {
            return Err(value(
                format!("volumes.{i}.path"),
                format!("{:?} is also volumes.{j}.path", v.path),
            ));
        }
        if let Some(n) = &v.name
            && let Some(j) = volumes[..i].iter().position(|o| o.name.as_ref() == Some(n))
        {
            return Err(value(
                format!("volumes.{i}.name"),
                format!("{n:?} is also volumes.{j}.name"),
            ));
        }
    }
    Ok(())
}
