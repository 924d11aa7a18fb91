//! TLS for depots: the client's trust settings (extra CA files, docker `certs.d`
//! directories, unverified TLS), turned into a ureq [`TlsConfig`] for one origin, and how a
//! failed handshake is described.

use std::path::PathBuf;

use tls_files::{read_certs, read_host_dir};
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};

pub use tls_files::TlsFileError;
pub(crate) use tls_files::read_key;

/// How the depot client trusts servers over `https://`: the settings every registry
/// command takes too (`--ca-file`, `--cert-dir`, `--insecure`), kept here as plain data
/// because this crate depends on no other workspace crate.
///
/// The trusted roots are the system's certificates (as for registries) plus every
/// [`TlsSettings::ca_files`] certificate plus, for the origin's `host[:port]`, the `*.crt`
/// files of its `certs.d` entry. With no system certificates and nothing extra, the bundled
/// Mozilla roots are used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM files whose CA certificates are trusted for every depot.
    pub ca_files: Vec<PathBuf>,
    /// `certs.d`-style directories, read as docker does: `<dir>/<host[:port]>/*.crt` are CAs
    /// for that origin (the port only when the URL names one), `X.cert` with `X.key` a
    /// client certificate it presents. Directories that do not exist are skipped; the first
    /// directory with an entry for the host wins.
    pub cert_dirs: Vec<PathBuf>,
    /// Use TLS without verifying the server's certificate.
    pub insecure: bool,
}

/// `host[:port]` of an `https://` URL, the port only when the URL names it (docker's
/// `certs.d` directory name). None for other URLs.
fn https_authority(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    Some(authority.rsplit_once('@').map_or(authority, |(_, a)| a))
}

impl TlsSettings {
    /// Reads every CA file now, so a missing or unusable one fails naming it even when no
    /// `https://` depot is contacted (a directory publisher, a plain-HTTP depot): a file the
    /// user named is never silently ignored.
    pub fn check_ca_files(&self) -> Result<(), TlsFileError> {
        for f in &self.ca_files {
            read_certs(f)?;
        }
        Ok(())
    }

    /// The ureq TLS configuration for `origin`: reads every CA file and the origin's
    /// `certs.d` entry now, so a bad file fails here, naming it.
    pub(crate) fn config_for(&self, origin: &str) -> Result<TlsConfig, TlsFileError> {
        let mut extra = Vec::new();
        for f in &self.ca_files {
            extra.extend(read_certs(f)?);
        }
        let mut identity = None;
        if let Some(host) = https_authority(origin) {
            let entry = self
                .cert_dirs
                .iter()
                .map(|d| d.join(host))
                .find(|d| d.is_dir());
            if let Some(dir) = entry {
                let found = read_host_dir(&dir)?;
                extra.extend(found.cas);
                identity = found.identity.map(client_cert).transpose()?;
            }
        }
        // The system's roots, as registries use, plus the extra CAs (a system store that
        // cannot be read in part still gives the rest); the bundled roots when there are none.
        let roots: Vec<Certificate<'static>> = rustls_native_certs::load_native_certs()
            .certs
            .iter()
            .chain(&extra)
            .map(|c| Certificate::from_der(c.as_ref()).to_owned())
            .collect();
        let roots = if roots.is_empty() {
            RootCerts::WebPki
        } else {
            RootCerts::from(roots)
        };
        Ok(TlsConfig::builder()
            .root_certs(roots)
            .client_cert(identity)
            .disable_verification(self.insecure)
            .build())
    }
}

/// A `certs.d` client certificate as ureq presents it.
fn client_cert(id: tls_files::ClientIdentity) -> Result<ClientCert, TlsFileError> {
    let key = PrivateKey::from_pem(&id.key_pem).map_err(|e| TlsFileError {
        path: id.key_file.clone(),
        problem: "no PEM private key in it",
        source: Some(Box::new(e)),
    })?;
    let chain: Vec<Certificate<'static>> = id
        .chain
        .iter()
        .map(|c| Certificate::from_der(c.as_ref()).to_owned())
        .collect();
    Ok(ClientCert::new_with_certs(&chain, key))
}

/// What went wrong in a failed TLS connection, for the error message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsProblem {
    /// The server's certificate was not accepted (unknown issuer, wrong name, expired...).
    Certificate,
    /// The server answered in plain HTTP (or something else that is not TLS).
    NotTls,
    /// No answer in time while connecting or during the handshake.
    Timeout,
    /// Another TLS failure.
    Other,
}

/// How a ureq error that happened on an `https://` URL reads as a TLS failure, if it is one.
pub(crate) fn classify(error: &ureq::Error) -> Option<TlsProblem> {
    let rustls_error = match error {
        ureq::Error::Rustls(e) => Some(e),
        ureq::Error::Io(e) => e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>()),
        _ => None,
    };
    match (error, rustls_error) {
        (_, Some(rustls::Error::InvalidCertificate(_))) => Some(TlsProblem::Certificate),
        (_, Some(rustls::Error::InvalidMessage(_))) => Some(TlsProblem::NotTls),
        (_, Some(_)) => Some(TlsProblem::Other),
        (ureq::Error::Timeout(ureq::Timeout::Connect), None) => Some(TlsProblem::Timeout),
        (ureq::Error::Tls(_), None) => Some(TlsProblem::Other),
        _ => None,
    }
}

/// The words after `URL: tls failure` for a problem.
pub(crate) fn describe(problem: TlsProblem, url: &str) -> String {
    let plain = url.replacen("https://", "http://", 1);
    match problem {
        TlsProblem::Certificate => "the server's certificate is not trusted (add its CA with a \
             CA file or a certs.d entry)"
            .to_owned(),
        TlsProblem::NotTls => {
            format!("the server does not speak TLS; if it is a plain HTTP depot, use {plain}")
        }
        TlsProblem::Timeout => format!(
            "no TLS handshake within the connect timeout; if it is a plain HTTP depot, use {plain}"
        ),
        TlsProblem::Other => "the TLS handshake failed".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certs_d_name_is_host_and_explicit_port() {
        assert_eq!(
            https_authority("https://depot.example:8443/hipster/"),
            Some("depot.example:8443")
        );
        assert_eq!(
            https_authority("https://user@depot.example/x"),
            Some("depot.example")
        );
        assert_eq!(https_authority("http://depot.example/"), None);
    }

    #[test]
    fn a_bad_ca_file_fails_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate\n").unwrap();
        for f in [&missing, &garbage] {
            let settings = TlsSettings {
                ca_files: vec![f.clone()],
                ..TlsSettings::default()
            };
            let e = settings.config_for("https://depot.example/").unwrap_err();
            assert_eq!(&e.path, f);
            assert!(e.to_string().starts_with(&f.display().to_string()), "{e}");
        }
    }

    #[test]
    fn a_client_certificate_without_its_key_fails_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("depot.example:8443");
        std::fs::create_dir(&host).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["client".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(host.join("client.cert"), cert.pem()).unwrap();
        let settings = TlsSettings {
            cert_dirs: vec![dir.path().to_owned()],
            ..TlsSettings::default()
        };
        let e = settings
            .config_for("https://depot.example:8443/")
            .unwrap_err();
        assert_eq!(e.path, host.join("client.key"));
        // With the key the identity is read and presented.
        std::fs::write(host.join("client.key"), key.serialize_pem()).unwrap();
        let config = settings.config_for("https://depot.example:8443/").unwrap();
        assert!(config.client_cert().is_some());
        // Another port is another certs.d entry.
        let config = settings.config_for("https://depot.example/").unwrap();
        assert!(config.client_cert().is_none());
    }
}
