//! ECDSA P-256 key pairs in the files cosign reads and writes.
//!
//! Private keys are read from plain PKCS#8 (`PRIVATE KEY`), encrypted PKCS#8 (`ENCRYPTED
//! PRIVATE KEY`, PBES2), SEC1 (`EC PRIVATE KEY`) and cosign's own encrypted files
//! (`ENCRYPTED SIGSTORE PRIVATE KEY`, `ENCRYPTED COSIGN PRIVATE KEY`, see [`SigningKey::to_cosign_pem`]).
//! Public keys are `PUBLIC KEY` PEM (SubjectPublicKeyInfo), the bytes `cosign public-key` prints.

use std::fmt;

use p256::ecdsa::signature::{Signer, Verifier};
use p256::pkcs8::der::Decode;
use p256::pkcs8::der::pem::LineEnding;
use p256::pkcs8::{DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use zeroize::Zeroizing;

use crate::sigstore_key;

/// PEM label of an unencrypted PKCS#8 private key.
pub const PEM_PRIVATE_KEY: &str = "PRIVATE KEY";
/// PEM label of a PBES2-encrypted PKCS#8 private key.
pub const PEM_ENCRYPTED_PRIVATE_KEY: &str = "ENCRYPTED PRIVATE KEY";
/// PEM label of a SEC1 EC private key.
pub const PEM_EC_PRIVATE_KEY: &str = "EC PRIVATE KEY";
/// PEM label cosign writes for its scrypt + secretbox encrypted keys.
pub const PEM_SIGSTORE_PRIVATE_KEY: &str = sigstore_key::LABEL;
/// The older label of the same format, still read by cosign.
pub const PEM_COSIGN_PRIVATE_KEY: &str = "ENCRYPTED COSIGN PRIVATE KEY";
/// PEM label of a SubjectPublicKeyInfo public key.
pub const PEM_PUBLIC_KEY: &str = "PUBLIC KEY";

/// id-ecPublicKey (RFC 5480).
const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
/// prime256v1 / secp256r1.
const OID_P256: &str = "1.2.840.10045.3.1.7";

/// The error a password callback returns (a terminal that cannot be read, an unset variable).
pub type PasswordError = Box<dyn std::error::Error + Send + Sync>;

/// A key file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The input is not a PEM document.
    #[error("{source_name}: not a PEM key file")]
    NotPem {
        /// The file (or other input) read.
        source_name: String,
        /// The PEM decoder's complaint.
        #[source]
        source: pkcs8::der::pem::Error,
    },
    /// The PEM label names a format this crate does not read.
    #[error("{source_name}: unsupported PEM type \"{label}\"")]
    UnsupportedPemType {
        /// The file read.
        source_name: String,
        /// The label found.
        label: String,
    },
    /// The password did not decrypt the key.
    #[error("{source_name}: wrong password (the key could not be decrypted)")]
    WrongPassword {
        /// The file read.
        source_name: String,
    },
    /// The key is not an ECDSA P-256 key.
    #[error("{source_name}: not an ECDSA P-256 key ({found})")]
    NotP256 {
        /// The file read.
        source_name: String,
        /// What was found instead (algorithm or curve OID).
        found: String,
    },
    /// The key's structure is broken.
    #[error("{source_name}: malformed key: {detail}")]
    Malformed {
        /// The file read.
        source_name: String,
        /// Which part is broken.
        detail: String,
    },
    /// The password callback failed.
    #[error("{source_name}: cannot get the password")]
    Password {
        /// The file that needed it.
        source_name: String,
        /// Why the callback failed.
        #[source]
        source: PasswordError,
    },
    /// Encoding or encrypting a key failed.
    #[error("cannot encode the {what}: {detail}")]
    Encode {
        /// Which output (`private key`, `public key`).
        what: &'static str,
        /// The encoder's complaint.
        detail: String,
    },
}

impl KeyError {
    /// The error for a cosign key file `source_name` that [`sigstore_key`] could not open or
    /// seal.
    fn sealed(e: sigstore_key::SealError, source_name: &str) -> KeyError {
        match e {
            sigstore_key::SealError::Malformed(detail) => KeyError::Malformed {
                source_name: source_name.to_owned(),
                detail,
            },
            sigstore_key::SealError::WrongPassword => KeyError::WrongPassword {
                source_name: source_name.to_owned(),
            },
            sigstore_key::SealError::Encode(detail) => KeyError::Encode {
                what: "private key",
                detail,
            },
        }
    }
}

/// A key's identity for display and for [`crate::policy`] evidence: `sha256:<hex>` of the
/// public key's SubjectPublicKeyInfo DER.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct KeyId(String);

impl KeyId {
    /// The full form, `sha256:<64 hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The short form for messages: `sha256:` and the first 12 hex digits.
    pub fn short(&self) -> &str {
        &self.0[..self.0.len().min("sha256:".len() + 12)]
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An ECDSA P-256 public key.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifyingKey {
    inner: p256::ecdsa::VerifyingKey,
    id: KeyId,
}

impl fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("VerifyingKey").field(&self.id.0).finish()
    }
}

impl VerifyingKey {
    fn new(inner: p256::ecdsa::VerifyingKey) -> Self {
        let der = inner
            .to_public_key_der()
            .expect("a P-256 point always encodes as SPKI");
        let id = KeyId(validator::Digest::sha256(der.as_bytes()).to_string());
        VerifyingKey { inner, id }
    }

    /// Reads a `PUBLIC KEY` PEM (SubjectPublicKeyInfo) holding a P-256 key.
    pub fn from_pem(bytes: &[u8], source_name: &str) -> Result<Self, KeyError> {
        let (label, der) = decode_pem(bytes, source_name)?;
        if label != PEM_PUBLIC_KEY {
            return Err(KeyError::UnsupportedPemType {
                source_name: source_name.to_owned(),
                label,
            });
        }
        let spki =
            pkcs8::SubjectPublicKeyInfoRef::from_der(&der).map_err(|e| KeyError::Malformed {
                source_name: source_name.to_owned(),
                detail: format!("SubjectPublicKeyInfo: {e}"),
            })?;
        check_p256(
            &spki.algorithm.oid.to_string(),
            spki.algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.decode_as::<pkcs8::ObjectIdentifier>().ok())
                .map(|o| o.to_string()),
            source_name,
        )?;
        let inner = p256::ecdsa::VerifyingKey::from_public_key_der(&der).map_err(|e| {
            KeyError::Malformed {
                source_name: source_name.to_owned(),
                detail: format!("public key point: {e}"),
            }
        })?;
        Ok(Self::new(inner))
    }

    /// The key as `PUBLIC KEY` PEM, exactly what `cosign public-key` prints.
    pub fn to_pem(&self) -> String {
        self.inner
            .to_public_key_pem(LineEnding::LF)
            .expect("a P-256 point always encodes as SPKI")
    }

    /// `sha256:<hex>` of the SubjectPublicKeyInfo DER.
    pub fn key_id(&self) -> &KeyId {
        &self.id
    }

    /// Checks a DER-encoded ECDSA-SHA256 signature over `message`.
    pub fn verify_der(&self, message: &[u8], der_signature: &[u8]) -> bool {
        let Ok(sig) = p256::ecdsa::DerSignature::from_bytes(der_signature) else {
            return false;
        };
        self.inner.verify(message, &sig).is_ok()
    }

    /// Checks a DER-encoded ECDSA signature over a message of which only the SHA-256 `digest`
    /// is known (a sigstore bundle's message signature over an image manifest).
    pub fn verify_prehashed_der(&self, digest: &[u8], der_signature: &[u8]) -> bool {
        use p256::ecdsa::signature::hazmat::PrehashVerifier;
        let Ok(sig) = p256::ecdsa::DerSignature::from_bytes(der_signature) else {
            return false;
        };
        digest.len() == 32 && self.inner.verify_prehash(digest, &sig).is_ok()
    }
}

/// An ECDSA P-256 private key. Its scalar is zeroized on drop.
#[derive(Clone)]
pub struct SigningKey {
    inner: p256::ecdsa::SigningKey,
    public: VerifyingKey,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("public", &self.public.id.0)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    fn new(inner: p256::ecdsa::SigningKey) -> Self {
        let public = VerifyingKey::new(*inner.verifying_key());
        SigningKey { inner, public }
    }

    /// Reads a private key PEM. `password` is called only when the format is encrypted;
    /// `source_name` (a file path) names the input in errors.
    pub fn from_pem(
        bytes: &[u8],
        source_name: &str,
        password: &mut dyn FnMut() -> Result<Zeroizing<String>, PasswordError>,
    ) -> Result<Self, KeyError> {
        let (label, der) = decode_pem(bytes, source_name)?;
        let der = Zeroizing::new(der);
        let mut ask = || {
            password().map_err(|source| KeyError::Password {
                source_name: source_name.to_owned(),
                source,
            })
        };
        match label.as_str() {
            PEM_PRIVATE_KEY => Self::from_pkcs8_der(&der, source_name),
            PEM_ENCRYPTED_PRIVATE_KEY => {
                let info = pkcs8::EncryptedPrivateKeyInfoRef::from_der(&der).map_err(|e| {
                    KeyError::Malformed {
                        source_name: source_name.to_owned(),
                        detail: format!("EncryptedPrivateKeyInfo: {e}"),
                    }
                })?;
                let pw = ask()?;
                let plain = info
                    .decrypt(pw.as_bytes())
                    .map_err(|_| KeyError::WrongPassword {
                        source_name: source_name.to_owned(),
                    })?;
                Self::from_pkcs8_der(plain.as_bytes(), source_name)
            }
            PEM_EC_PRIVATE_KEY => {
                let ec = sec1::EcPrivateKey::from_der(&der).map_err(|e| KeyError::Malformed {
                    source_name: source_name.to_owned(),
                    detail: format!("SEC1 ECPrivateKey: {e}"),
                })?;
                let curve = ec
                    .parameters
                    .as_ref()
                    .and_then(|p| p.named_curve())
                    .map(|o| o.to_string());
                check_p256(OID_EC_PUBLIC_KEY, curve, source_name)?;
                let inner = p256::ecdsa::SigningKey::from_slice(ec.private_key).map_err(|e| {
                    KeyError::Malformed {
                        source_name: source_name.to_owned(),
                        detail: format!("private scalar: {e}"),
                    }
                })?;
                Ok(Self::new(inner))
            }
            PEM_SIGSTORE_PRIVATE_KEY | PEM_COSIGN_PRIVATE_KEY => {
                let pw = ask()?;
                let plain = sigstore_key::decrypt(&der, pw.as_bytes())
                    .map_err(|e| KeyError::sealed(e, source_name))?;
                Self::from_pkcs8_der(&plain, source_name)
            }
            _ => Err(KeyError::UnsupportedPemType {
                source_name: source_name.to_owned(),
                label,
            }),
        }
    }

    fn from_pkcs8_der(der: &[u8], source_name: &str) -> Result<Self, KeyError> {
        let info = pkcs8::PrivateKeyInfoRef::from_der(der).map_err(|e| KeyError::Malformed {
            source_name: source_name.to_owned(),
            detail: format!("PKCS#8 PrivateKeyInfo: {e}"),
        })?;
        check_p256(
            &info.algorithm.oid.to_string(),
            info.algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.decode_as::<pkcs8::ObjectIdentifier>().ok())
                .map(|o| o.to_string()),
            source_name,
        )?;
        let inner = p256::ecdsa::SigningKey::try_from(info).map_err(|e| KeyError::Malformed {
            source_name: source_name.to_owned(),
            detail: format!("PKCS#8 EC private key: {e}"),
        })?;
        Ok(Self::new(inner))
    }

    /// The matching public key.
    pub fn verifying_key(&self) -> &VerifyingKey {
        &self.public
    }

    /// Signs `message` with ECDSA-SHA256 and returns the DER `SEQUENCE { r, s }` (Go's
    /// `ecdsa.SignASN1` form, which cosign writes).
    pub fn sign_der(&self, message: &[u8]) -> Vec<u8> {
        let sig: p256::ecdsa::DerSignature = self.inner.sign(message);
        sig.to_bytes().to_vec()
    }

    /// PKCS#8 DER of the private key (secret; zeroized on drop).
    fn pkcs8_der(&self) -> Result<Zeroizing<Vec<u8>>, KeyError> {
        let doc = self.inner.to_pkcs8_der().map_err(|e| KeyError::Encode {
            what: "private key",
            detail: e.to_string(),
        })?;
        Ok(Zeroizing::new(doc.as_bytes().to_vec()))
    }

    /// The private key as PKCS#8 PEM: `ENCRYPTED PRIVATE KEY` (PBES2: scrypt + AES-256-CBC)
    /// when `password` is given, `PRIVATE KEY` otherwise. `cosign import-key-pair` reads the
    /// unencrypted form.
    pub fn to_pkcs8_pem(&self, password: Option<&str>) -> Result<Zeroizing<String>, KeyError> {
        let r = match password {
            Some(pw) => self.inner.to_pkcs8_encrypted_pem(pw, LineEnding::LF),
            None => self.inner.to_pkcs8_pem(LineEnding::LF),
        };
        r.map_err(|e| KeyError::Encode {
            what: "private key",
            detail: e.to_string(),
        })
    }

    /// The private key in cosign's own file format (`ENCRYPTED SIGSTORE PRIVATE KEY`: scrypt
    /// N=65536 r=8 p=1, NaCl secretbox over PKCS#8 DER), as `cosign generate-key-pair` writes.
    pub fn to_cosign_pem(&self, password: &str) -> Result<Zeroizing<String>, KeyError> {
        let der = self.pkcs8_der()?;
        sigstore_key::encrypt_pem(&der, password.as_bytes())
            .map_err(|e| KeyError::sealed(e, "cosign key file"))
    }
}

/// A freshly generated key pair.
#[derive(Debug, Clone)]
pub struct KeyPair {
    /// The private half.
    pub signing: SigningKey,
}

impl KeyPair {
    /// The public half.
    pub fn verifying(&self) -> &VerifyingKey {
        self.signing.verifying_key()
    }
}

/// Generates an ECDSA P-256 key pair from the operating system's random source.
pub fn generate() -> KeyPair {
    use p256::elliptic_curve::Generate;
    let inner = p256::ecdsa::SigningKey::try_generate()
        .expect("the operating system's random source failed");
    KeyPair {
        signing: SigningKey::new(inner),
    }
}

fn decode_pem(bytes: &[u8], source_name: &str) -> Result<(String, Vec<u8>), KeyError> {
    let (label, der) =
        pkcs8::der::pem::decode_vec(bytes.trim_ascii()).map_err(|source| KeyError::NotPem {
            source_name: source_name.to_owned(),
            source,
        })?;
    Ok((label.to_owned(), der))
}

fn check_p256(algorithm: &str, curve: Option<String>, source_name: &str) -> Result<(), KeyError> {
    if algorithm != OID_EC_PUBLIC_KEY {
        let name = match algorithm {
            "1.2.840.113549.1.1.1" => "RSA",
            "1.3.101.112" => "Ed25519",
            _ => "unknown algorithm",
        };
        return Err(KeyError::NotP256 {
            source_name: source_name.to_owned(),
            found: format!("{name}, OID {algorithm}"),
        });
    }
    match curve.as_deref() {
        Some(OID_P256) => Ok(()),
        Some(other) => {
            let name = match other {
                "1.3.132.0.34" => "P-384",
                "1.3.132.0.35" => "P-521",
                "1.3.132.0.10" => "secp256k1",
                _ => "unknown curve",
            };
            Err(KeyError::NotP256 {
                source_name: source_name.to_owned(),
                found: format!("EC key on {name}, OID {other}"),
            })
        }
        None => Err(KeyError::Malformed {
            source_name: source_name.to_owned(),
            detail: "EC key without a named curve".to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A P-256 key encrypted by `openssl pkcs8 -topk8 -v2 aes-256-cbc -v2prf hmacWithSHA256`
    /// with password `pw` (PBES2, PBKDF2-SHA256, AES-256-CBC), and its public key.
    const OPENSSL_PBES2: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----
MIHsMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAhLe5PNiEgP4QICCAAw
DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEELlxgrYy6NWkDdvgnAcfRxoEgZAQ
p40sliPg8aM5ryJrOx29bHHJu5eVEW+aNUU4/i7mJvLJasLtWfpAaimqbqDQYaI3
sluLTgnnxvj/25qUY0vdtFazWm3VlnnTDfSONXTia8dZPaQScIdYD8gsaXUPVLgm
6dCCN9C4ktvdU31H0Zeu3gR5ID7f0M1l/TJJSAyDi5oZkKx1VuTji1bchlJdaOc=
-----END ENCRYPTED PRIVATE KEY-----
";
    const OPENSSL_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE7MhH2OQ3Q7kyOnwLQ+dZ5UE3qVSo
Aoqy3+LlP0CeUtdlqlXOUp600JlMZKIONdZRM/BbkC8p/FxBpYa38zxFow==
-----END PUBLIC KEY-----
";
    /// `sha256sum` of the public key's DER (`openssl ec -pubout -outform DER`).
    const OPENSSL_PUB_ID: &str =
        "sha256:ccb72d7d8815a4eacae637515fe54ef2593c0c311adec90aea7b53b31511373b";
    /// SEC1 P-256 key from `openssl ecparam -name prime256v1 -genkey -noout`.
    const OPENSSL_SEC1: &str = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIK0F9sTgC/ceFrcN/iGFcROMo5EK5e3HtlhpOMxgG78koAoGCCqGSM49
AwEHoUQDQgAEW1E1pMKQnBSoIt4TZqMOCvX5f+mE9CRe+VANH1CFJN7C0uKgjd9z
7eMLdl7bmUkS2rSO7h1jQbshHXnIse+WyQ==
-----END EC PRIVATE KEY-----
";
    /// P-384 and Ed25519 PKCS#8 keys from `openssl genpkey`.
    const OPENSSL_P384: &str = "-----BEGIN PRIVATE KEY-----
MIG2AgEAMBAGByqGSM49AgEGBSuBBAAiBIGeMIGbAgEBBDDGfXR6y1DhJ2LWBfkX
f5R3qhSQ4Lblrrz+tqe94r36wAC7rHl7AqjzktLk/j1WdDehZANiAAQ+lSD57Wyy
EltDXw9/8E8sB5S6I4XNUf2i3/UTWiTxCeHqknuidnWtb1SuMSdagpWVi6GZn6D/
G+l0BOtzl4FDxrEV6QfjUXHfWvohYNyPjvczaI3h1QaXU+Dc153e2ho=
-----END PRIVATE KEY-----
";
    const OPENSSL_ED25519: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIDWkmqDRyJYmMFn+bTsUarRtEW9Gcex3QnRT1NlrIopo
-----END PRIVATE KEY-----
";

    fn pw(s: &'static str) -> impl FnMut() -> Result<Zeroizing<String>, PasswordError> {
        move || Ok(Zeroizing::new(s.to_owned()))
    }

    fn never() -> Result<Zeroizing<String>, PasswordError> {
        panic!("the password was asked for a format that needs none")
    }

    fn assert_same(a: &SigningKey, b: &SigningKey) {
        assert_eq!(a.verifying_key(), b.verifying_key());
        let sig = a.sign_der(b"m");
        assert!(b.verifying_key().verify_der(b"m", &sig));
    }

    #[test]
    fn plain_pkcs8_round_trip_without_password() {
        let k = generate();
        let pem = k.signing.to_pkcs8_pem(None).unwrap();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
        let back = SigningKey::from_pem(pem.as_bytes(), "k.pem", &mut never).unwrap();
        assert_same(&k.signing, &back);
    }

    #[test]
    fn encrypted_pkcs8_round_trip_and_wrong_password() {
        let k = generate();
        let pem = k.signing.to_pkcs8_pem(Some("secret")).unwrap();
        assert!(pem.starts_with("-----BEGIN ENCRYPTED PRIVATE KEY-----\n"));
        let back = SigningKey::from_pem(pem.as_bytes(), "k.pem", &mut pw("secret")).unwrap();
        assert_same(&k.signing, &back);
        let e = SigningKey::from_pem(pem.as_bytes(), "dir/k.pem", &mut pw("nope")).unwrap_err();
        assert!(matches!(e, KeyError::WrongPassword { .. }));
        assert_eq!(
            e.to_string(),
            "dir/k.pem: wrong password (the key could not be decrypted)"
        );
    }

    #[test]
    fn openssl_files_are_read() {
        let k = SigningKey::from_pem(OPENSSL_PBES2.as_bytes(), "o.pem", &mut pw("pw")).unwrap();
        let public = VerifyingKey::from_pem(OPENSSL_PUB.as_bytes(), "o.pub").unwrap();
        assert_eq!(k.verifying_key(), &public);
        assert_eq!(public.key_id().as_str(), OPENSSL_PUB_ID);
        assert_eq!(public.key_id().short(), &OPENSSL_PUB_ID[..19]);
        assert_eq!(public.to_pem(), OPENSSL_PUB);
        SigningKey::from_pem(OPENSSL_SEC1.as_bytes(), "s.pem", &mut never).unwrap();
    }

    #[test]
    fn cosign_format_round_trip_and_wrong_password() {
        let k = generate();
        let pem = k.signing.to_cosign_pem("pw").unwrap();
        assert!(pem.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n"));
        let back = SigningKey::from_pem(pem.as_bytes(), "cosign.key", &mut pw("pw")).unwrap();
        assert_same(&k.signing, &back);
        let e = SigningKey::from_pem(pem.as_bytes(), "cosign.key", &mut pw("bad")).unwrap_err();
        assert!(
            matches!(e, KeyError::WrongPassword { ref source_name } if source_name == "cosign.key")
        );
        // The older label reads the same.
        let old = pem.replace("SIGSTORE", "COSIGN");
        SigningKey::from_pem(old.as_bytes(), "old.key", &mut pw("pw")).unwrap();
    }

    #[test]
    fn password_callback_failure_names_the_file() {
        let k = generate();
        let pem = k.signing.to_pkcs8_pem(Some("x")).unwrap();
        let e = SigningKey::from_pem(pem.as_bytes(), "k.pem", &mut || Err("no terminal".into()))
            .unwrap_err();
        assert_eq!(e.to_string(), "k.pem: cannot get the password");
    }

    #[test]
    fn other_keys_are_refused() {
        let e = SigningKey::from_pem(OPENSSL_P384.as_bytes(), "p384.pem", &mut never).unwrap_err();
        assert!(e.to_string().contains("P-384"), "{e}");
        let e = SigningKey::from_pem(OPENSSL_ED25519.as_bytes(), "ed.pem", &mut never).unwrap_err();
        assert!(e.to_string().contains("Ed25519"), "{e}");
        let e = SigningKey::from_pem(
            b"-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
            "r.pem",
            &mut never,
        )
        .unwrap_err();
        assert!(matches!(e, KeyError::UnsupportedPemType { .. }), "{e}");
        let e = VerifyingKey::from_pem(OPENSSL_SEC1.as_bytes(), "x.pub").unwrap_err();
        assert!(e.to_string().contains("\"EC PRIVATE KEY\""), "{e}");
        let e = SigningKey::from_pem(b"hello", "junk", &mut never).unwrap_err();
        assert!(e.to_string().starts_with("junk: not a PEM"), "{e}");
    }
}
