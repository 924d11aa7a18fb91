//! The certificates behind a signature action: parsing, the RSA checks, and pkg's walk from a
//! signing certificate to a trust anchor.
//!
//! pkg's rules (`Publisher.verify_chain` and `__check_extensions` in pkg5's
//! `client/publisher.py`), kept here: a certificate may carry only the key usages
//! `digitalSignature`, `keyCertSign` and `cRLSign`; the signing certificate needs
//! `digitalSignature` and a CA `keyCertSign` when the key usage extension is there; a CA must
//! say `CA:TRUE`; a path length constraint counts the CAs below it; any other extension marked
//! critical refuses the certificate. The walk goes up by issuer name: a trust anchor whose
//! key verifies the certificate ends it; a self-signed certificate that no anchor verifies is
//! refused; otherwise an intermediate (from the signature's `chain`) that is a CA, verifies it
//! and passes the checks takes its place. Like pkg, validity dates are not checked: a build
//! from a lockfile must not start failing because time passed.

use std::fmt;
use std::path::{Path, PathBuf};

use rsa::PublicKey as RsaPublicKey;
use rsa::pkcs1v15::Pkcs1v15Sign;
use rsa::pkcs8::DecodePublicKey;
use sha2::Digest as _;
use x509_cert::Certificate;
use x509_cert::der::{Encode, oid::ObjectIdentifier};
use x509_cert::ext::pkix::{BasicConstraints, KeyUsage, KeyUsages};

use super::SignatureError;

/// `sha256WithRSAEncryption` and its siblings (RFC 4055); nothing else signs certificates pkg
/// can verify (it checks every certificate signature with PKCS#1 v1.5).
const SHA256_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");
const SHA384_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.12");
const SHA512_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.13");
const KEY_USAGE: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.15");
const BASIC_CONSTRAINTS: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.19");

/// The SHA-2 digests signatures use (`rsa-sha256` and so on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sha2 {
    Sha256,
    Sha384,
    Sha512,
}

impl Sha2 {
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        match name {
            "sha256" => Some(Sha2::Sha256),
            "sha384" => Some(Sha2::Sha384),
            "sha512" => Some(Sha2::Sha512),
            _ => None,
        }
    }

    pub(crate) fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            Sha2::Sha256 => sha2::Sha256::digest(data).to_vec(),
            Sha2::Sha384 => sha2::Sha384::digest(data).to_vec(),
            Sha2::Sha512 => sha2::Sha512::digest(data).to_vec(),
        }
    }

    fn padding(self) -> Pkcs1v15Sign {
        match self {
            Sha2::Sha256 => Pkcs1v15Sign::new::<sha2::Sha256>(),
            Sha2::Sha384 => Pkcs1v15Sign::new::<sha2::Sha384>(),
            Sha2::Sha512 => Pkcs1v15Sign::new::<sha2::Sha512>(),
        }
    }
}

/// What a certificate is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Usage {
    /// Sign manifests (`digitalSignature`).
    CodeSigning,
    /// Sign certificates (`CA:TRUE`, `keyCertSign`).
    CertSigning,
}

/// One parsed certificate with the encodings the checks compare.
#[derive(Clone)]
pub(crate) struct Cert {
    cert: Certificate,
    subject: Vec<u8>,
    issuer: Vec<u8>,
    tbs: Vec<u8>,
    name: String,
}

impl fmt::Debug for Cert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cert").field("subject", &self.name).finish()
    }
}

impl Cert {
    /// Every certificate in PEM text (`what` names the input in errors).
    pub(crate) fn from_pem_all(pem: &[u8], what: &str) -> Result<Vec<Cert>, SignatureError> {
        let bad = |message: String| SignatureError::BadCertificate {
            what: what.to_owned(),
            message,
        };
        let certs = Certificate::load_pem_chain(pem).map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("no PEM certificate".into()));
        }
        certs
            .into_iter()
            .map(|cert| {
                let tbs = cert.tbs_certificate();
                let enc =
                    |r: Result<Vec<u8>, x509_cert::der::Error>| r.map_err(|e| bad(e.to_string()));
                Ok(Cert {
                    subject: enc(tbs.subject().to_der())?,
                    issuer: enc(tbs.issuer().to_der())?,
                    tbs: enc(tbs.to_der())?,
                    name: tbs.subject().to_string(),
                    cert,
                })
            })
            .collect()
    }

    /// The subject, as `CN=…,O=…`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn self_issued(&self) -> bool {
        self.subject == self.issuer
    }

    fn rsa_key(&self) -> Result<RsaPublicKey, SignatureError> {
        let spki = self
            .cert
            .tbs_certificate()
            .subject_public_key_info()
            .to_der()
            .map_err(|e| self.unsupported(format!("public key: {e}")))?;
        RsaPublicKey::from_public_key_der(&spki)
            .map_err(|e| self.unsupported(format!("not an RSA public key pkg can use: {e}")))
    }

    fn unsupported(&self, message: String) -> SignatureError {
        SignatureError::BadCertificate {
            what: format!("certificate {}", self.name),
            message,
        }
    }

    /// Whether `data` signed with this certificate's key (PKCS#1 v1.5) gives `signature`.
    pub(crate) fn verifies(
        &self,
        hash: Sha2,
        data: &[u8],
        signature: &[u8],
    ) -> Result<bool, SignatureError> {
        let key = self.rsa_key()?;
        Ok(key
            .verify(hash.padding(), &hash.digest(data), signature)
            .is_ok())
    }

    /// Whether `issuer`'s key signed this certificate. A key or algorithm pkg could not use
    /// either counts as not signed.
    fn signed_by(&self, issuer: &Cert) -> bool {
        let hash = match self.cert.signature_algorithm().oid {
            SHA256_WITH_RSA => Sha2::Sha256,
            SHA384_WITH_RSA => Sha2::Sha384,
            SHA512_WITH_RSA => Sha2::Sha512,
            _ => return false,
        };
        let Some(sig) = self.cert.signature().as_bytes() else {
            return false;
        };
        issuer.verifies(hash, &self.tbs, sig).unwrap_or(false)
    }

    /// pkg's `check_ca`: `CA:TRUE`, and `keyCertSign` unless the key usage extension is
    /// absent.
    fn is_ca(&self) -> bool {
        let tbs = self.cert.tbs_certificate();
        let ca = matches!(tbs.get_extension::<BasicConstraints>(), Ok(Some((_, bc))) if bc.ca);
        let sign = match tbs.get_extension::<KeyUsage>() {
            Ok(Some((_, ku))) => ku.key_cert_sign(),
            Ok(None) => true,
            Err(_) => false,
        };
        ca && sign
    }

    /// pkg's extension checks for `usage`, `below` CAs under this certificate.
    pub(crate) fn check_extensions(&self, usage: Usage, below: u32) -> Result<(), SignatureError> {
        let refuse = |problem: String| SignatureError::CertificateUse {
            subject: self.name.clone(),
            problem,
        };
        let tbs = self.cert.tbs_certificate();
        for ext in tbs.extensions().map(Vec::as_slice).unwrap_or_default() {
            if ext.extn_id == BASIC_CONSTRAINTS {
                let bc = tbs
                    .get_extension::<BasicConstraints>()
                    .map_err(|e| refuse(format!("basic constraints: {e}")))?
                    .map(|(_, bc)| bc)
                    .ok_or_else(|| refuse("basic constraints unreadable".into()))?;
                if let Some(len) = bc.path_len_constraint
                    && below > u32::from(len)
                {
                    return Err(refuse(format!(
                        "path length constraint {len} is shorter than the {below} CA(s) below it"
                    )));
                }
                if usage == Usage::CertSigning && !bc.ca {
                    return Err(refuse("basic constraints do not say CA:TRUE".into()));
                }
            } else if ext.extn_id == KEY_USAGE {
                let ku = tbs
                    .get_extension::<KeyUsage>()
                    .map_err(|e| refuse(format!("key usage: {e}")))?
                    .map(|(_, ku)| ku)
                    .ok_or_else(|| refuse("key usage extension unreadable".into()))?;
                check_key_usage(&ku, usage).map_err(refuse)?;
            } else if ext.critical {
                return Err(refuse(format!(
                    "critical extension {} is not one pkg supports",
                    ext.extn_id
                )));
            }
        }
        Ok(())
    }
}

/// The key usage bits pkg accepts, and the one `usage` needs.
fn check_key_usage(ku: &KeyUsage, usage: Usage) -> Result<(), String> {
    let allowed = KeyUsages::DigitalSignature | KeyUsages::KeyCertSign | KeyUsages::CRLSign;
    let mut set = ku.0;
    if !ku.key_agreement() {
        // pkg reads encipherOnly and decipherOnly only together with keyAgreement.
        set -= KeyUsages::EncipherOnly | KeyUsages::DecipherOnly;
    }
    let extra = set - allowed;
    if !extra.is_empty() {
        return Err(format!(
            "key usage {extra:?} is not one pkg accepts (only digitalSignature, keyCertSign and \
             cRLSign)"
        ));
    }
    let (needed, name) = match usage {
        Usage::CodeSigning => (KeyUsages::DigitalSignature, "digitalSignature"),
        Usage::CertSigning => (KeyUsages::KeyCertSign, "keyCertSign"),
    };
    if !set.contains(needed) {
        return Err(format!("key usage lacks {name}"));
    }
    Ok(())
}

/// The CA certificates signatures must lead to: pkg's `trust-anchor-directory`.
#[derive(Debug, Clone, Default)]
pub struct TrustAnchors {
    certs: Vec<Cert>,
    source: Option<PathBuf>,
}

impl TrustAnchors {
    /// Every certificate in the PEM files of `dir` (each file may hold several; hidden files
    /// are skipped). A file that is not PEM certificates is an error naming it, and so is a
    /// directory without any.
    pub fn load_dir(dir: &Path) -> Result<Self, SignatureError> {
        let io = |path: &Path, source| SignatureError::TrustAnchorIo {
            path: path.to_owned(),
            source,
        };
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let entry = entry.map_err(|e| io(dir, e))?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            // Follows symlinks (hashed links as c_rehash makes them).
            let meta = std::fs::metadata(entry.path()).map_err(|e| io(&entry.path(), e))?;
            if meta.is_file() {
                names.push(entry.path());
            }
        }
        names.sort();
        let mut certs = Vec::new();
        for path in &names {
            let pem = std::fs::read(path).map_err(|e| io(path, e))?;
            certs.extend(Cert::from_pem_all(
                &pem,
                &format!("trust anchor {}", path.display()),
            )?);
        }
        if certs.is_empty() {
            return Err(SignatureError::NoTrustAnchors {
                path: dir.to_owned(),
            });
        }
        Ok(TrustAnchors {
            certs,
            source: Some(dir.to_owned()),
        })
    }

    /// Trust anchors from PEM text (`what` names it in errors).
    pub fn from_pem(pem: &[u8], what: &str) -> Result<Self, SignatureError> {
        Ok(TrustAnchors {
            certs: Cert::from_pem_all(pem, what)?,
            source: None,
        })
    }

    /// How many certificates there are.
    pub fn len(&self) -> usize {
        self.certs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }

    /// Walks from `leaf` to an anchor through `intermediates` (see the module docs).
    pub(crate) fn verify_chain(
        &self,
        leaf: &Cert,
        intermediates: &[Cert],
    ) -> Result<(), SignatureError> {
        leaf.check_extensions(Usage::CodeSigning, 0)?;
        let mut cert = leaf;
        let mut below = 0u32;
        // Each step uses a new intermediate, so the walk ends.
        for _ in 0..=intermediates.len() {
            if self
                .certs
                .iter()
                .any(|a| a.subject == cert.issuer && cert.signed_by(a))
            {
                return Ok(());
            }
            if cert.self_issued() {
                return Err(SignatureError::UntrustedSelfSigned {
                    subject: cert.name.clone(),
                    anchors: self.describe(),
                });
            }
            let mut problems = Vec::new();
            let next = intermediates.iter().find(|c| {
                if c.subject != cert.issuer || !c.is_ca() || !cert.signed_by(c) {
                    return false;
                }
                match c.check_extensions(Usage::CertSigning, below) {
                    Ok(()) => true,
                    Err(e) => {
                        problems.push(e.to_string());
                        false
                    }
                }
            });
            match next {
                Some(c) => {
                    cert = c;
                    below += 1;
                }
                None => {
                    return Err(SignatureError::BrokenChain {
                        subject: cert.name.clone(),
                        issuer: cert.cert.tbs_certificate().issuer().to_string(),
                        anchors: self.describe(),
                        problems,
                    });
                }
            }
        }
        Err(SignatureError::BrokenChain {
            subject: cert.name.clone(),
            issuer: cert.cert.tbs_certificate().issuer().to_string(),
            anchors: self.describe(),
            problems: vec!["the chain loops".into()],
        })
    }

    fn describe(&self) -> String {
        match &self.source {
            Some(p) => format!("{} ({} certificate(s))", p.display(), self.certs.len()),
            None => format!("{} certificate(s)", self.certs.len()),
        }
    }
}
