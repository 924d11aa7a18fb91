//! The registry client flags every command that talks to a registry takes (push, pull, copy,
//! build --push, worker run, login): one clap struct, flattened into each, turned into
//! `registry_client::ClientOptions`.

use std::path::PathBuf;

use registry_client::{AuthEnv, ClientBuilder, ClientOptions};

/// How to reach registries: credentials and TLS.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientArgs {
    /// Read (and, for login/logout, write) credentials in this docker config.json /
    /// containers auth.json instead of $REGISTRY_AUTH_FILE or $DOCKER_CONFIG/config.json
    /// (~/.docker/config.json).
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// Trust the CA certificates in this PEM file for every registry (repeatable; added to the
    /// system's).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Vec<PathBuf>,
    /// Per-registry TLS files in certs.d layout, DIR/HOST:PORT/*.crt (CAs) and
    /// client.cert/client.key (repeatable; default /etc/containers/certs.d and
    /// /etc/docker/certs.d).
    #[arg(long, value_name = "DIR")]
    pub cert_dir: Vec<PathBuf>,
    /// Use TLS without verifying the registry's certificate (anyone on the path can read and
    /// change the traffic; prefer --ca-file).
    #[arg(long, conflicts_with = "plain_http")]
    pub insecure: bool,
    /// Plain HTTP to every registry. Without it loopback registries get plain HTTP unless a
    /// CA file, a certs.d entry or --insecure says they use TLS; others always get HTTPS.
    #[arg(long)]
    pub plain_http: bool,
}

impl ClientArgs {
    /// The library settings.
    pub fn options(&self) -> ClientOptions {
        ClientOptions {
            auth_file: self.auth_file.clone(),
            ca_files: self.ca_file.clone(),
            cert_dirs: self.cert_dir.clone(),
            insecure: self.insecure,
            plain_http: self.plain_http,
        }
    }

    /// A client builder over the process environment's credential files, warning once on
    /// stderr when certificates are not verified.
    pub fn builder(&self) -> ClientBuilder {
        warn_insecure(self.insecure);
        self.options().builder(&AuthEnv::current())
    }
}

/// The warning for unverified TLS (flag or worker.toml).
pub fn warn_insecure(insecure: bool) {
    if insecure {
        eprintln!(
            "rdctl: warning: --insecure: registry TLS certificates are not verified; anyone on the network path can read and change the traffic"
        );
    }
}
