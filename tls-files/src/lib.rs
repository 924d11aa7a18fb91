//! The one reader of TLS files for every client that reaches an upstream: extra CA files,
//! private keys, and docker's `certs.d` layout (`<dir>/<host[:port]>/*.crt` are CAs for that
//! host, `X.cert` with `X.key` a client certificate it presents).
//!
//! It reads and checks; it does not connect. The registry client (reqwest) and the IPS depot
//! client (ureq) turn what it returns into their own TLS configuration, so both read the same
//! files the same way and a bad file fails with the same message, naming it. Which `certs.d`
//! entry belongs to which host stays with the caller (the registry client matches canonical
//! registry hosts, the depot client a URL's `host[:port]`).
//!
//! Invariants: depends on no workspace crate; every error names the file or directory.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A TLS file that cannot be used (names the file).
#[derive(Debug, thiserror::Error)]
#[error("{path}: {problem}", path = path.display())]
pub struct TlsFileError {
    /// The file or directory.
    pub path: PathBuf,
    /// What is wrong with it.
    pub problem: &'static str,
    /// The underlying error, when there is one.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl TlsFileError {
    /// What is wrong, with the underlying error when there is one (`problem: source`), for
    /// callers that keep the path in a field of their own.
    pub fn reason(&self) -> String {
        match &self.source {
            Some(s) => format!("{}: {s}", self.problem),
            None => self.problem.to_owned(),
        }
    }
}

fn file_err(
    path: &Path,
    problem: &'static str,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
) -> TlsFileError {
    TlsFileError {
        path: path.to_owned(),
        problem,
        source,
    }
}

/// The bytes of a file.
pub fn read(path: &Path) -> Result<Vec<u8>, TlsFileError> {
    std::fs::read(path).map_err(|e| file_err(path, "cannot read", Some(Box::new(e))))
}

/// The certificates of a PEM document read from `path` (at least one).
fn pem_certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(path, "not PEM certificates", Some(Box::new(e))))?;
    if certs.is_empty() {
        return Err(file_err(path, "no PEM certificate in it", None));
    }
    Ok(certs)
}

/// Every certificate in a PEM file of CAs, each checked to be one rustls can use as a root; a
/// file without one is an error.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let certs = pem_certs(path, &read(path)?)?;
    let mut store = rustls::RootCertStore::empty();
    for c in &certs {
        store
            .add(c.clone())
            .map_err(|e| file_err(path, "not a usable CA certificate", Some(Box::new(e))))?;
    }
    Ok(certs)
}

/// The private key in a PEM file.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsFileError> {
    key_of(path, &read(path)?)
}

fn key_of(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsFileError> {
    PrivateKeyDer::from_pem_slice(pem)
        .map_err(|e| file_err(path, "no PEM private key in it", Some(Box::new(e))))
}

/// A client certificate found in a `certs.d` entry: `X.cert` (the chain) with `X.key`.
#[derive(Debug)]
pub struct ClientIdentity {
    /// The certificate file.
    pub cert_file: PathBuf,
    /// Its PEM text, as read (for clients that take PEM).
    pub cert_pem: Vec<u8>,
    /// Its certificates, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The key file (`X.key` beside `X.cert`).
    pub key_file: PathBuf,
    /// Its PEM text, as read.
    pub key_pem: Vec<u8>,
    /// The key.
    pub key: PrivateKeyDer<'static>,
}

impl ClientIdentity {
    /// The certificate chain and the key in one PEM document (what reqwest's `Identity`
    /// reads).
    pub fn pem(&self) -> Vec<u8> {
        let mut pem = self.cert_pem.clone();
        pem.push(b'\n');
        pem.extend_from_slice(&self.key_pem);
        pem
    }
}

/// What one `certs.d/<host>` directory holds.
#[derive(Debug, Default)]
pub struct HostDir {
    /// The CAs of its `*.crt` files, in file name order.
    pub cas: Vec<CertificateDer<'static>>,
    /// Its client certificate, if an `X.cert` is there (the last one by name wins, as the
    /// registry client has always read it).
    pub identity: Option<ClientIdentity>,
}

/// Reads a `certs.d/<host>` directory: `*.crt` CAs; `X.cert` with `X.key` a client identity.
/// Other files are ignored. A file that is there but unusable is an error naming it.
pub fn read_host_dir(dir: &Path) -> Result<HostDir, TlsFileError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| file_err(dir, "cannot list", Some(Box::new(e))))?
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut out = HostDir::default();
    for f in &files {
        match f.extension().and_then(|e| e.to_str()) {
            Some("crt") => out.cas.extend(read_certs(f)?),
            Some("cert") => {
                let cert_pem = read(f)?;
                let chain = pem_certs(f, &cert_pem)?;
                let key_file = f.with_extension("key");
                let key_pem = read(&key_file)?;
                let key = key_of(&key_file, &key_pem)?;
                out.identity = Some(ClientIdentity {
                    cert_file: f.clone(),
                    cert_pem,
                    chain,
                    key_file,
                    key_pem,
                    key,
                });
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert() -> (String, String) {
        let k = rcgen::KeyPair::generate().unwrap();
        let c = rcgen::CertificateParams::new(vec!["h.example".to_owned()])
            .unwrap()
            .self_signed(&k)
            .unwrap();
        (c.pem(), k.serialize_pem())
    }

    #[test]
    fn a_host_dir_gives_its_cas_and_client_certificate() {
        let d = tempfile::tempdir().unwrap();
        let (ca, _) = cert();
        let (c, k) = cert();
        std::fs::write(d.path().join("ca.crt"), &ca).unwrap();
        std::fs::write(d.path().join("client.cert"), &c).unwrap();
        std::fs::write(d.path().join("client.key"), &k).unwrap();
        std::fs::write(d.path().join("README"), "not read").unwrap();
        let h = read_host_dir(d.path()).unwrap();
        assert_eq!(h.cas.len(), 1);
        let id = h.identity.unwrap();
        assert_eq!(id.chain.len(), 1);
        assert_eq!(id.key_file, d.path().join("client.key"));
        let pem = String::from_utf8(id.pem()).unwrap();
        assert!(
            pem.contains("BEGIN CERTIFICATE") && pem.contains("PRIVATE KEY"),
            "{pem}"
        );
    }

    #[test]
    fn every_unusable_file_is_named() {
        let d = tempfile::tempdir().unwrap();
        let bad = d.path().join("bad.crt");
        std::fs::write(&bad, "no pem here").unwrap();
        let e = read_certs(&bad).unwrap_err();
        assert_eq!(e.path, bad);
        assert_eq!(
            e.to_string(),
            format!("{}: no PEM certificate in it", bad.display())
        );
        // A client certificate without its key names the key file.
        let (c, _) = cert();
        let h = d.path().join("host");
        std::fs::create_dir(&h).unwrap();
        std::fs::write(h.join("client.cert"), &c).unwrap();
        let e = read_host_dir(&h).unwrap_err();
        assert_eq!(e.path, h.join("client.key"));
        assert!(e.reason().starts_with("cannot read: "), "{}", e.reason());
        // A key file without a key.
        std::fs::write(h.join("client.key"), "nothing").unwrap();
        let e = read_host_dir(&h).unwrap_err();
        assert_eq!(e.problem, "no PEM private key in it");
        // A directory that is not there.
        let e = read_host_dir(&d.path().join("absent")).unwrap_err();
        assert_eq!(e.problem, "cannot list");
    }
}
