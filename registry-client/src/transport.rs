//! Transport: how the client reaches registries (TLS roots, `certs.d`, client certificates,
//! plain HTTP, timeouts) and its retry policy.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::auth;
use crate::client::{Client, Retry};
use crate::error::ClientError;
use crate::keychain::{Env as AuthEnv, Keychain};
use crate::reference::canonical_host;

/// Where docker and the containers tools keep per-host TLS material; pass them to
/// [`ClientBuilder::cert_dirs`] to read them as those tools do.
pub const DEFAULT_CERT_DIRS: &[&str] = &["/etc/containers/certs.d", "/etc/docker/certs.d"];

impl Client {
    /// A builder with defaults.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }
}

/// How to reach registries: credentials and TLS, the settings `rdctl`'s client flags and the
/// worker's `worker.toml` share. [`ClientOptions::builder`] turns them into a [`ClientBuilder`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientOptions {
    /// Read credentials from this file first (`--auth-file`); the environment's files follow
    /// ([`Keychain::from_env`]).
    pub auth_file: Option<PathBuf>,
    /// Extra CA certificates (PEM files) trusted for every registry.
    pub ca_files: Vec<PathBuf>,
    /// `certs.d`-style directories (`<dir>/<host:port>/*.crt`, `client.cert`/`client.key`);
    /// empty means [`DEFAULT_CERT_DIRS`].
    pub cert_dirs: Vec<PathBuf>,
    /// Use TLS without verifying certificates.
    pub insecure: bool,
    /// Plain HTTP to every registry.
    pub plain_http: bool,
    /// kubelet credential provider plugins, asked before the credential files.
    pub credential_providers: Vec<crate::credential_provider::CredentialProvider>,
}

impl ClientOptions {
    /// A builder with these settings and a keychain over `env`'s credential files.
    pub fn builder(&self, env: &AuthEnv) -> ClientBuilder {
        let mut b = Client::builder()
            .plain_http(self.plain_http)
            .insecure(self.insecure)
            .keychain(
                Keychain::from_env(self.auth_file.as_deref(), env)
                    .with_providers(self.credential_providers.clone()),
            );
        for f in &self.ca_files {
            b = b.ca_file(f);
        }
        if self.cert_dirs.is_empty() {
            b.cert_dirs(DEFAULT_CERT_DIRS.iter().map(PathBuf::from))
        } else {
            b.cert_dirs(self.cert_dirs.iter().cloned())
        }
    }

    /// The file `login` writes and `logout` edits ([`Keychain::login_file`]).
    pub fn login_file(&self, env: &AuthEnv) -> Option<PathBuf> {
        Keychain::login_file(self.auth_file.as_deref(), env)
    }
}

/// Builds a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    plain_http: bool,
    tls: bool,
    insecure: bool,
    retry: Retry,
    chunk_size: u64,
    timeout: Option<Duration>,
    keychain: Keychain,
    ca_files: Vec<PathBuf>,
    cert_dirs: Vec<PathBuf>,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            plain_http: false,
            tls: false,
            insecure: false,
            retry: Retry::default(),
            chunk_size: 8 << 20,
            timeout: Some(Duration::from_secs(60)),
            keychain: Keychain::empty(),
            ca_files: Vec::new(),
            cert_dirs: Vec::new(),
        }
    }
}

impl ClientBuilder {
    /// Talk plain HTTP to every registry.
    pub fn plain_http(mut self, yes: bool) -> Self {
        self.plain_http = yes;
        self
    }

    /// Use TLS for loopback hosts too (they default to plain HTTP unless a CA file or
    /// `insecure` is given): for a caller that was told `https://` for such a host.
    pub fn tls(mut self, yes: bool) -> Self {
        self.tls = yes;
        self
    }

    /// Use TLS without verifying the registry's certificate (skopeo's `--tls-verify=false`,
    /// without its fallback to plain HTTP). Only when the operator asks for it.
    pub fn insecure(mut self, yes: bool) -> Self {
        self.insecure = yes;
        self
    }

    /// Where credentials come from (default: none, anonymous access).
    pub fn keychain(mut self, keychain: Keychain) -> Self {
        self.keychain = keychain;
        self
    }

    /// Trust this PEM file's CA certificates for every registry (in addition to the system's).
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_files.push(path.into());
        self
    }

    /// Read per-host TLS material from these `certs.d`-style directories: `<dir>/<host>/*.crt`
    /// are CAs for `<host>` (`host:port` as in the reference), `*.cert` with the matching
    /// `*.key` a client certificate. Directories that do not exist are skipped.
    pub fn cert_dirs(mut self, dirs: impl IntoIterator<Item = impl Into<PathBuf>>) -> Self {
        self.cert_dirs.extend(dirs.into_iter().map(Into::into));
        self
    }

    /// The retry policy.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Blobs above this size are pushed in chunks of this size (default 8 MiB); it also bounds
    /// the memory one push holds.
    pub fn chunk_size(mut self, bytes: u64) -> Self {
        self.chunk_size = bytes.max(1);
        self
    }

    /// Timeout for connecting and for each read (default none).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    pub(crate) fn http(
        &self,
        cas: &[reqwest::Certificate],
        identity: Option<reqwest::Identity>,
    ) -> Result<reqwest::Client, ClientError> {
        let mut b = reqwest::Client::builder()
            .user_agent(concat!("rdctl/", env!("CARGO_PKG_VERSION")))
            .use_rustls_tls();
        if let Some(t) = self.timeout {
            b = b.connect_timeout(t).read_timeout(t);
        }
        for c in cas {
            b = b.add_root_certificate(c.clone());
        }
        if let Some(id) = identity {
            b = b.identity(id);
        }
        if self.insecure {
            b = b.danger_accept_invalid_certs(true);
        }
        b.build().map_err(|source| ClientError::Http {
            url: String::new(),
            source,
        })
    }

    /// A plain HTTP client with this builder's CA files, `insecure` and timeouts (and the
    /// same rustls and user agent), for an upstream that is not a registry: the registry's
    /// event endpoints. Reads every CA file now, so a bad one fails here, naming it.
    pub fn http_client(&self) -> Result<reqwest::Client, ClientError> {
        let mut cas = Vec::new();
        for f in &self.ca_files {
            cas.extend(read_cas(f)?);
        }
        self.http(&cas, None)
    }

    /// Builds the client (reads every CA file and `certs.d` entry now, so a bad one fails
    /// here, naming the file).
    pub fn build(self) -> Result<Client, ClientError> {
        let mut global = Vec::new();
        for f in &self.ca_files {
            global.extend(read_cas(f)?);
        }
        let http = self.http(&global, None)?;
        let mut per_host = HashMap::new();
        for dir in &self.cert_dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in entries.flatten() {
                // The directory may spell the host any way (`LocalHost:5000`, `host:443`).
                let host = canonical_host(&e.file_name().to_string_lossy());
                if per_host.contains_key(&host) || !e.path().is_dir() {
                    continue;
                }
                let (cas, identity) = read_host_dir(&e.path())?;
                let mut all = global.clone();
                all.extend(cas);
                per_host.insert(host, self.http(&all, identity)?);
            }
        }
        Ok(Client {
            http,
            per_host: Arc::new(per_host),
            tls_configured: self.tls || !global.is_empty() || self.insecure,
            auth: Arc::new(auth::AuthState::new(self.keychain)),
            plain_http: self.plain_http,
            retry: Retry {
                attempts: self.retry.attempts.max(1),
                ..self.retry
            },
            chunk_size: self.chunk_size,
            blob_flights: Arc::default(),
        })
    }
}

/// A TLS file [`tls_files`] refused, as the client's error (naming the file).
fn tls_err(e: tls_files::TlsFileError) -> ClientError {
    ClientError::Tls {
        reason: e.reason(),
        path: e.path,
    }
}

/// Every certificate in a PEM file of CAs.
fn read_cas(path: &Path) -> Result<Vec<reqwest::Certificate>, ClientError> {
    tls_files::read_certs(path)
        .map_err(tls_err)?
        .iter()
        .map(|c| reqwest::Certificate::from_der(c.as_ref()))
        .collect::<Result<_, _>>()
        .map_err(|e| ClientError::Tls {
            path: path.to_owned(),
            reason: format!("not DER certificates: {e}"),
        })
}

/// A `certs.d/<host>` directory ([`tls_files::read_host_dir`]) as reqwest's CAs and identity.
fn read_host_dir(
    dir: &Path,
) -> Result<(Vec<reqwest::Certificate>, Option<reqwest::Identity>), ClientError> {
    let found = tls_files::read_host_dir(dir).map_err(tls_err)?;
    let cas = found
        .cas
        .iter()
        .map(|c| reqwest::Certificate::from_der(c.as_ref()))
        .collect::<Result<_, _>>()
        .map_err(|e| ClientError::Tls {
            path: dir.to_owned(),
            reason: format!("not DER certificates: {e}"),
        })?;
    let identity = match found.identity {
        None => None,
        Some(id) => Some(
            reqwest::Identity::from_pem(&id.pem()).map_err(|e| ClientError::Tls {
                path: id.cert_file.clone(),
                reason: format!("not a PEM certificate and key: {e}"),
            })?,
        ),
    };
    Ok((cas, identity))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::authority;
    use reqwest::Url;

    #[test]
    fn plain_http_for_loopback_hosts_in_any_spelling() {
        let c = ClientBuilder::default().build().unwrap();
        for (registry, base) in [
            ("127.0.0.1:5000", "http://127.0.0.1:5000"),
            ("localhost", "http://localhost"),
            ("LOCALHOST:5000", "http://localhost:5000"),
            ("LocalHost.:5000", "http://localhost:5000"),
            ("[0:0:0:0:0:0:0:1]:5000", "http://[::1]:5000"),
            ("reg.example:443", "https://reg.example"),
            ("Reg.Example:8443", "https://reg.example:8443"),
            // A name that starts like a loopback address is not one.
            ("127.example.com:5000", "https://127.example.com:5000"),
            ("index.docker.io", "https://registry-1.docker.io"),
            ("docker.io", "https://registry-1.docker.io"),
        ] {
            assert_eq!(c.base(registry), base, "{registry}");
        }
    }

    #[test]
    fn a_url_belongs_to_its_canonical_registry() {
        for (url, registry) in [
            ("http://LocalHost:5000/v2/", "localhost:5000"),
            ("https://reg.example:443/v2/", "reg.example"),
            (
                "https://registry-1.docker.io/v2/library/nginx/manifests/1",
                "docker.io",
            ),
            ("http://[0:0::1]:5000/v2/", "[::1]:5000"),
            ("https://reg.example:8443/v2/", "reg.example:8443"),
        ] {
            assert_eq!(authority(&Url::parse(url).unwrap()), registry, "{url}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let r = Retry {
            attempts: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(350),
        };
        assert_eq!(r.delay(1), Duration::from_millis(100));
        assert_eq!(r.delay(2), Duration::from_millis(200));
        assert_eq!(r.delay(3), Duration::from_millis(350));
    }
}
