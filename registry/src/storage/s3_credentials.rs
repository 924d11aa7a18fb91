//! Where the S3 store's credentials come from: keys in the registry's config file, a named
//! profile, the `AWS_*` environment variables, or the shared AWS config and credentials files.
//!
//! The shared files are parsed by `aws-runtime`'s `env_config` (the parser `aws-config` itself
//! uses, already built as a dependency of `aws-sdk-s3`), so `[profile x]` sections, the
//! credentials file overriding the config file, `AWS_CONFIG_FILE`,
//! `AWS_SHARED_CREDENTIALS_FILE` and `~` behave as in the AWS CLI. `aws-config`'s whole provider
//! chain is not used: it would add STS, SSO and IMDS clients for features a SeaweedFS
//! deployment does not have. Profiles holding static keys are supported; a profile that only
//! names a role, an SSO session or a credential process is refused with a message saying so.

use std::fmt;
#[cfg(feature = "s3")]
use std::future::Future;
use std::path::PathBuf;
#[cfg(feature = "s3")]
use std::task::{Context, Poll, Waker};

#[cfg(feature = "s3")]
use aws_runtime::env_config::file::{EnvConfigFileKind, EnvConfigFiles};
#[cfg(feature = "s3")]
use aws_runtime::env_config::section::EnvConfigSections;
#[cfg(feature = "s3")]
use aws_types::os_shim_internal::{Env, Fs};

/// A static key pair (and session token) for SigV4. `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
    /// Session token of temporary credentials.
    pub session_token: Option<String>,
}

impl fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"** redacted **")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "** redacted **"),
            )
            .finish()
    }
}

/// The credential settings of the registry's config file (`s3_access_key_id`,
/// `s3_secret_access_key`, `s3_session_token`, `s3_profile`, `s3_config_file`,
/// `s3_credentials_file`). `Debug` never shows the secret.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct S3CredentialSettings {
    /// Access key id (with the secret).
    pub access_key_id: Option<String>,
    /// Secret access key (with the key id).
    pub secret_access_key: Option<String>,
    /// Session token (with the key pair).
    pub session_token: Option<String>,
    /// Profile of the shared files to use, ahead of the environment's keys.
    pub profile: Option<String>,
    /// The shared config file (default `$AWS_CONFIG_FILE`, else `~/.aws/config`).
    pub config_file: Option<PathBuf>,
    /// The shared credentials file (default `$AWS_SHARED_CREDENTIALS_FILE`, else
    /// `~/.aws/credentials`).
    pub credentials_file: Option<PathBuf>,
}

impl fmt::Debug for S3CredentialSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3CredentialSettings")
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "** redacted **"),
            )
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "** redacted **"),
            )
            .field("profile", &self.profile)
            .field("config_file", &self.config_file)
            .field("credentials_file", &self.credentials_file)
            .finish()
    }
}

/// Credentials could not be resolved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialsError {
    /// Only one half of a key pair is set.
    #[error("{where_}: {present} is set but {missing} is not")]
    HalfPair {
        /// Config file or environment.
        where_: &'static str,
        /// The key that is set.
        present: &'static str,
        /// The key that is missing.
        missing: &'static str,
    },
    /// A shared file could not be read or parsed.
    #[error("cannot load the AWS shared config/credentials files: {reason}")]
    Files {
        /// The loader's message (names the file).
        reason: String,
    },
    /// The selected profile does not exist.
    #[error("AWS profile {profile:?} ({chosen_by}) is not in {files}")]
    NoProfile {
        /// The profile.
        profile: String,
        /// What selected it.
        chosen_by: &'static str,
        /// The files read.
        files: String,
    },
    /// The profile has no static keys.
    #[error(
        "AWS profile {profile:?} has no aws_access_key_id/aws_secret_access_key{what}; only \
         static keys are supported for the S3 store (set them in the profile, in the registry \
         config file or in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
    )]
    NoKeys {
        /// The profile.
        profile: String,
        /// What it has instead, if anything known (`" (it uses role_arn)"`).
        what: String,
    },
}

/// Which source gave the credentials, for the startup log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// The registry's config file.
    ConfigFile,
    /// `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`.
    Environment,
    /// A profile of the shared files.
    Profile(String),
}

impl fmt::Display for CredentialSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialSource::ConfigFile => f.write_str("the registry config file"),
            CredentialSource::Environment => f.write_str("AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"),
            CredentialSource::Profile(p) => write!(f, "AWS profile {p:?}"),
        }
    }
}

#[cfg(feature = "s3")]
fn pair(
    where_: &'static str,
    names: (&'static str, &'static str),
    id: Option<String>,
    secret: Option<String>,
    token: Option<String>,
) -> Result<Option<S3Credentials>, CredentialsError> {
    match (id, secret) {
        (Some(access_key_id), Some(secret_access_key)) => Ok(Some(S3Credentials {
            access_key_id,
            secret_access_key,
            session_token: token,
        })),
        (None, None) => Ok(None),
        (Some(_), None) => Err(CredentialsError::HalfPair {
            where_,
            present: names.0,
            missing: names.1,
        }),
        (None, Some(_)) => Err(CredentialsError::HalfPair {
            where_,
            present: names.1,
            missing: names.0,
        }),
    }
}

#[cfg(feature = "s3")]
/// Environment variables the shared-file loader may consult.
const LOADER_VARS: [&str; 4] = [
    "HOME",
    "USERPROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
];

#[cfg(feature = "s3")]
/// Loads and parses the shared files.
fn load_sections(
    settings: &S3CredentialSettings,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(EnvConfigSections, String), CredentialsError> {
    let mut files = EnvConfigFiles::builder();
    let mut names = Vec::new();
    match &settings.config_file {
        Some(p) => {
            files = files.with_file(EnvConfigFileKind::Config, p);
            names.push(p.display().to_string());
        }
        None => {
            files = files.include_default_config_file(true);
            names.push(env("AWS_CONFIG_FILE").unwrap_or_else(|| "~/.aws/config".to_owned()));
        }
    }
    match &settings.credentials_file {
        Some(p) => {
            files = files.with_file(EnvConfigFileKind::Credentials, p);
            names.push(p.display().to_string());
        }
        None => {
            files = files.include_default_credentials_file(true);
            names.push(
                env("AWS_SHARED_CREDENTIALS_FILE")
                    .unwrap_or_else(|| "~/.aws/credentials".to_owned()),
            );
        }
    }
    let vars: Vec<(&str, String)> = LOADER_VARS
        .iter()
        .filter_map(|k| env(k).map(|v| (*k, v)))
        .collect();
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let proc_env = Env::from_slice(&vars);
    let fs = Fs::real();
    let files = files.build();
    let fut = aws_runtime::env_config::source::load(&proc_env, &fs, &files);
    // The loader is async only in signature: with the real file system it reads with std::fs
    // and never waits, so one poll finishes it. This keeps opening a store synchronous.
    let mut fut = std::pin::pin!(fut);
    let source = match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r.map_err(|e| CredentialsError::Files {
            reason: aws_sdk_s3::error::DisplayErrorContext(&e).to_string(),
        })?,
        Poll::Pending => {
            return Err(CredentialsError::Files {
                reason: "the loader did not finish in one poll".to_owned(),
            });
        }
    };
    let sections = EnvConfigSections::parse(source).map_err(|e| CredentialsError::Files {
        reason: e.to_string(),
    })?;
    Ok((sections, names.join(" and ")))
}

#[cfg(feature = "s3")]
fn from_profile(
    settings: &S3CredentialSettings,
    env: &dyn Fn(&str) -> Option<String>,
    profile: &str,
    chosen_by: &'static str,
    required: bool,
) -> Result<Option<S3Credentials>, CredentialsError> {
    let (sections, files) = load_sections(settings, env)?;
    let Some(p) = sections.get_profile(profile) else {
        return if required {
            Err(CredentialsError::NoProfile {
                profile: profile.to_owned(),
                chosen_by,
                files,
            })
        } else {
            Ok(None)
        };
    };
    let get = |k: &str| p.get(k).map(str::to_owned);
    match pair(
        "AWS profile",
        ("aws_access_key_id", "aws_secret_access_key"),
        get("aws_access_key_id"),
        get("aws_secret_access_key"),
        get("aws_session_token"),
    )? {
        Some(c) => Ok(Some(c)),
        None => {
            let what = [
                "role_arn",
                "sso_session",
                "sso_start_url",
                "credential_process",
            ]
            .into_iter()
            .find(|k| p.get(k).is_some())
            .map(|k| format!(" (it uses {k})"))
            .unwrap_or_default();
            Err(CredentialsError::NoKeys {
                profile: profile.to_owned(),
                what,
            })
        }
    }
}

/// Resolves credentials, first match wins:
///
/// 1. the key pair in the registry's config file;
/// 2. the profile named in the registry's config file (it must exist and hold keys);
/// 3. `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`);
/// 4. the profile `$AWS_PROFILE` (it must exist), else `default` if the shared files have it.
///
/// `Ok(None)` when nothing is configured: requests are then signed with a placeholder pair,
/// which a SeaweedFS without identities accepts and one with identities refuses.
#[cfg(feature = "s3")]
pub fn resolve(
    settings: &S3CredentialSettings,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(S3Credentials, CredentialSource)>, CredentialsError> {
    let tag = |src: CredentialSource| move |c| (c, src);
    if let Some(c) = pair(
        "registry config file",
        ("s3_access_key_id", "s3_secret_access_key"),
        settings.access_key_id.clone(),
        settings.secret_access_key.clone(),
        settings.session_token.clone(),
    )? {
        return Ok(Some((c, CredentialSource::ConfigFile)));
    }
    if let Some(p) = &settings.profile {
        return Ok(
            from_profile(settings, env, p, "s3_profile in the registry config", true)?
                .map(tag(CredentialSource::Profile(p.clone()))),
        );
    }
    if let Some(c) = pair(
        "environment",
        ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
        env("AWS_ACCESS_KEY_ID"),
        env("AWS_SECRET_ACCESS_KEY"),
        env("AWS_SESSION_TOKEN"),
    )? {
        return Ok(Some((c, CredentialSource::Environment)));
    }
    match env("AWS_PROFILE") {
        Some(p) => Ok(from_profile(settings, env, &p, "AWS_PROFILE", true)?
            .map(tag(CredentialSource::Profile(p.clone())))),
        None => Ok(
            from_profile(settings, env, "default", "the default profile", false)?
                .map(tag(CredentialSource::Profile("default".to_owned()))),
        ),
    }
}

#[cfg(feature = "s3")]
#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    fn files(dir: &std::path::Path) -> S3CredentialSettings {
        std::fs::write(
            dir.join("config"),
            "[default]\nregion = us-east-1\n\n[profile ops]\naws_access_key_id = OPSCONF\naws_secret_access_key = opsconf-secret\n\n[profile role]\nrole_arn = arn:aws:iam::1:role/x\nsource_profile = ops\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("credentials"),
            "[default]\naws_access_key_id = DEFKEY\naws_secret_access_key = def-secret\n\n[ops]\naws_access_key_id = OPSKEY\naws_secret_access_key = ops-secret\naws_session_token = ops-token\n",
        )
        .unwrap();
        S3CredentialSettings {
            config_file: Some(dir.join("config")),
            credentials_file: Some(dir.join("credentials")),
            ..Default::default()
        }
    }

    fn id(r: Option<(S3Credentials, CredentialSource)>) -> (String, CredentialSource) {
        let (c, s) = r.expect("credentials");
        (c.access_key_id, s)
    }

    #[test]
    fn sources_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let base = files(dir.path());
        let env_keys = env_of(&[
            ("AWS_ACCESS_KEY_ID", "ENVKEY"),
            ("AWS_SECRET_ACCESS_KEY", "env-secret"),
            ("AWS_PROFILE", "ops"),
        ]);
        // Config-file keys beat everything.
        let mut s = base.clone();
        s.access_key_id = Some("FILEKEY".into());
        s.secret_access_key = Some("file-secret".into());
        s.profile = Some("ops".into());
        assert_eq!(
            id(resolve(&s, &env_keys).unwrap()),
            ("FILEKEY".into(), CredentialSource::ConfigFile)
        );
        // A configured profile beats the environment; the credentials file wins over config.
        let mut s = base.clone();
        s.profile = Some("ops".into());
        let (c, src) = resolve(&s, &env_keys).unwrap().unwrap();
        assert_eq!(c.access_key_id, "OPSKEY");
        assert_eq!(c.session_token.as_deref(), Some("ops-token"));
        assert_eq!(src, CredentialSource::Profile("ops".into()));
        // Environment keys beat AWS_PROFILE.
        assert_eq!(
            id(resolve(&base, &env_keys).unwrap()),
            ("ENVKEY".into(), CredentialSource::Environment)
        );
        // AWS_PROFILE, then default.
        assert_eq!(
            id(resolve(&base, &env_of(&[("AWS_PROFILE", "ops")])).unwrap()).0,
            "OPSKEY"
        );
        assert_eq!(
            id(resolve(&base, &env_of(&[])).unwrap()),
            ("DEFKEY".into(), CredentialSource::Profile("default".into()))
        );
    }

    #[test]
    fn default_files_follow_the_aws_variables() {
        let dir = tempfile::tempdir().unwrap();
        files(dir.path());
        let config = dir.path().join("config");
        let creds = dir.path().join("credentials");
        let env = env_of(&[
            ("AWS_CONFIG_FILE", config.to_str().unwrap()),
            ("AWS_SHARED_CREDENTIALS_FILE", creds.to_str().unwrap()),
            ("AWS_PROFILE", "ops"),
        ]);
        let (c, _) = resolve(&S3CredentialSettings::default(), &env)
            .unwrap()
            .unwrap();
        assert_eq!(c.access_key_id, "OPSKEY");
        // Without any file or variable there is nothing, and that is not an error.
        let empty = tempfile::tempdir().unwrap();
        let home = env_of(&[("HOME", empty.path().to_str().unwrap())]);
        assert!(
            resolve(&S3CredentialSettings::default(), &home)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let base = files(dir.path());
        let mut s = base.clone();
        s.access_key_id = Some("K".into());
        let e = resolve(&s, &env_of(&[])).unwrap_err().to_string();
        assert!(e.contains("s3_secret_access_key"), "{e}");
        let e = resolve(&base, &env_of(&[("AWS_SECRET_ACCESS_KEY", "x")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("AWS_ACCESS_KEY_ID"), "{e}");
        let mut s = base.clone();
        s.profile = Some("nope".into());
        let e = resolve(&s, &env_of(&[])).unwrap_err().to_string();
        assert!(e.contains("\"nope\"") && e.contains("credentials"), "{e}");
        let mut s = base.clone();
        s.profile = Some("role".into());
        let e = resolve(&s, &env_of(&[])).unwrap_err().to_string();
        assert!(e.contains("role_arn"), "{e}");
        let mut s = base.clone();
        s.credentials_file = Some(dir.path().join("missing"));
        s.profile = Some("ops".into());
        let e = resolve(&s, &env_of(&[])).unwrap_err().to_string();
        assert!(e.contains("missing"), "{e}");
        let secret = format!("{:?}", resolve(&base, &env_of(&[])).unwrap().unwrap().0);
        assert!(!secret.contains("def-secret"), "{secret}");
    }
}
