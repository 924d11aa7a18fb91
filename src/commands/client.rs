//! The registry client flags every command that talks to a registry takes (push, pull, copy,
//! build --push, worker run, login): one clap struct, flattened into each, turned into
//! `registry_client::ClientOptions`. Its TLS part, [`TlsArgs`], is also what every command
//! that reads a depot takes (lock, build, ips list/info/contents), turned into
//! `ips_bridge::TlsSettings`: one set of flags for both kinds of server.

use std::path::PathBuf;

use anyhow::Context as _;

use registry_client::{AuthEnv, ClientBuilder, ClientOptions, DEFAULT_CERT_DIRS};

/// How to trust TLS servers, registries and depots alike.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// Trust the CA certificates in this PEM file for every registry and https:// depot
    /// (repeatable; added to the system's).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Vec<PathBuf>,
    /// Per-server TLS files in certs.d layout, DIR/HOST:PORT/*.crt (CAs) and
    /// client.cert/client.key, for registries and https:// depots (repeatable; default
    /// /etc/containers/certs.d and /etc/docker/certs.d).
    #[arg(long, value_name = "DIR")]
    pub cert_dir: Vec<PathBuf>,
    /// Use TLS without verifying the server's certificate, registry or depot (anyone on the
    /// path can read and change the traffic; prefer --ca-file).
    #[arg(long)]
    pub insecure: bool,
}

impl TlsArgs {
    /// The depot client's settings; `--cert-dir` defaults to the directories registries use.
    pub fn depot_tls(&self) -> ips_bridge::TlsSettings {
        let cert_dirs = if self.cert_dir.is_empty() {
            DEFAULT_CERT_DIRS.iter().map(PathBuf::from).collect()
        } else {
            self.cert_dir.clone()
        };
        ips_bridge::TlsSettings {
            ca_files: self.ca_file.clone(),
            cert_dirs,
            insecure: self.insecure,
        }
    }

    /// [`TlsArgs::depot_tls`], warning once on stderr when certificates are not verified;
    /// every `--ca-file` is read now, so one that is missing fails whether or not a depot
    /// needs it (a directory publisher reads none).
    pub fn depot_tls_warned(&self) -> anyhow::Result<ips_bridge::TlsSettings> {
        warn_insecure(self.insecure);
        let tls = self.depot_tls();
        tls.check_ca_files().context("--ca-file")?;
        Ok(tls)
    }
}

/// How to reach registries: credentials and TLS.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientArgs {
    /// Read (and, for login/logout, write) credentials in this docker config.json /
    /// containers auth.json instead of $REGISTRY_AUTH_FILE or $DOCKER_CONFIG/config.json
    /// (~/.docker/config.json).
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// CA files, certs.d directories, --insecure.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Plain HTTP to every registry. Without it loopback registries get plain HTTP unless a
    /// CA file, a certs.d entry or --insecure says they use TLS; others always get HTTPS.
    /// (A depot's URL scheme says whether it uses TLS.)
    #[arg(long, conflicts_with = "insecure")]
    pub plain_http: bool,
}

impl ClientArgs {
    /// The library settings.
    pub fn options(&self) -> ClientOptions {
        ClientOptions {
            auth_file: self.auth_file.clone(),
            ca_files: self.tls.ca_file.clone(),
            cert_dirs: self.tls.cert_dir.clone(),
            insecure: self.tls.insecure,
            plain_http: self.plain_http,
            credential_providers: Vec::new(),
        }
    }

    /// A client builder over the process environment's credential files, warning once on
    /// stderr when certificates are not verified.
    pub fn builder(&self) -> ClientBuilder {
        warn_insecure(self.tls.insecure);
        self.options().builder(&AuthEnv::current())
    }

    /// The registry client these flags describe ([`ClientArgs::builder`], built).
    pub fn client(&self) -> anyhow::Result<registry_client::Client> {
        self.builder()
            .build()
            .context("cannot build the registry client")
    }
}

/// The warning for unverified TLS (flag or worker.toml).
pub fn warn_insecure(insecure: bool) {
    if insecure {
        eprintln!(
            "rdctl: warning: --insecure: TLS certificates (registries, depots) are not verified; anyone on the network path can read and change the traffic"
        );
    }
}
