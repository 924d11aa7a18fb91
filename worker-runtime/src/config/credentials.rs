//! `[[credential_providers]]` and `image_credential_provider_bin_dir`: kubelet's credential
//! provider plugins (its `CredentialProviderConfig`), each an executable in the directory that
//! answers for the images its `match_images` patterns name.

use std::collections::BTreeMap;
use std::path::PathBuf;

use config_toml::HumanDuration;
use registry_client::credential_provider::{API_VERSION, CredentialProvider};
use serde::Deserialize;

use super::{Invalid, valid_name};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileProvider {
    name: String,
    match_images: Vec<String>,
    #[serde(alias = "default_cache_duration_secs")]
    default_cache_duration: Option<HumanDuration>,
    api_version: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

/// The providers checked; `bin_dir` is the (absolute) directory they are found in.
pub(super) fn providers(
    bin_dir: Option<PathBuf>,
    tables: Vec<FileProvider>,
) -> Result<Vec<CredentialProvider>, Invalid> {
    if !tables.is_empty() && bin_dir.is_none() {
        return Err((
            "image_credential_provider_bin_dir",
            "credential_providers are configured but no directory to find them in".into(),
        ));
    }
    let field = "credential_providers";
    let mut out = Vec::new();
    for p in tables {
        if !valid_name(&p.name) {
            return Err((field, format!("name {:?} is not a plain file name", p.name)));
        }
        if let Some(v) = &p.api_version
            && v != API_VERSION
        {
            return Err((
                field,
                format!("{}: api_version {v:?} is not {API_VERSION}", p.name),
            ));
        }
        if p.match_images.is_empty() {
            return Err((field, format!("{}: match_images is empty", p.name)));
        }
        out.push(CredentialProvider {
            command: bin_dir.clone().unwrap_or_default().join(&p.name),
            name: p.name,
            args: p.args,
            env: p.env.into_iter().collect(),
            match_images: p.match_images,
            default_cache_duration: super::duration_or(p.default_cache_duration, 0),
        });
    }
    Ok(out)
}
