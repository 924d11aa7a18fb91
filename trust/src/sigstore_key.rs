//! cosign's own encrypted private key files (`ENCRYPTED SIGSTORE PRIVATE KEY`, formerly
//! `ENCRYPTED COSIGN PRIVATE KEY`): the PEM body is a JSON document naming the key derivation
//! (scrypt with its parameters and salt) and the cipher (NaCl secretbox with its nonce), and
//! the ciphertext is the PKCS#8 DER of the key, sealed with secretbox (tag first).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use crypto_secretbox::XSalsa20Poly1305;
use crypto_secretbox::aead::{AeadInPlace, KeyInit};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// The PEM label of the files cosign writes (`keys::PEM_SIGSTORE_PRIVATE_KEY`).
pub(crate) const LABEL: &str = "ENCRYPTED SIGSTORE PRIVATE KEY";

/// Why a cosign key file could not be opened or sealed; the caller names the file (this
/// module sees only bytes).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SealError {
    /// Its structure is broken: which part.
    Malformed(String),
    /// The password did not open the secretbox.
    WrongPassword,
    /// Sealing a new file failed: why.
    Encode(String),
}

/// scrypt cost parameters cosign accepts when decrypting, `(N, r, p)`; anything else is
/// refused before any work is done (as cosign does, against costly inputs).
const ACCEPTED_PARAMS: [(u64, u32, u32); 3] = [(32768, 8, 1), (65536, 8, 1), (131072, 8, 1)];
/// The parameters new files get.
const NEW_PARAMS: (u64, u32, u32) = (65536, 8, 1);
const SALT_LEN: usize = 32;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;

#[derive(Serialize, Deserialize)]
struct Encrypted {
    kdf: Kdf,
    cipher: Cipher,
    #[serde(with = "b64")]
    ciphertext: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct Kdf {
    name: String,
    params: ScryptParams,
    #[serde(with = "b64")]
    salt: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct ScryptParams {
    #[serde(rename = "N")]
    n: u64,
    r: u32,
    p: u32,
}

#[derive(Serialize, Deserialize)]
struct Cipher {
    name: String,
    #[serde(with = "b64")]
    nonce: Vec<u8>,
}

mod b64 {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        STANDARD.decode(s).map_err(serde::de::Error::custom)
    }
}

fn derive_key(password: &[u8], salt: &[u8], (n, r, p): (u64, u32, u32)) -> Zeroizing<[u8; 32]> {
    let log_n = n.trailing_zeros() as u8;
    let params = scrypt::Params::new(log_n, r, p).expect("accepted scrypt parameters are valid");
    let mut key = Zeroizing::new([0u8; 32]);
    scrypt::scrypt(password, salt, &params, key.as_mut()).expect("32 bytes is a valid length");
    key
}

/// Decrypts the PEM body (`der` is the base64-decoded JSON) to PKCS#8 DER.
pub(crate) fn decrypt(body: &[u8], password: &[u8]) -> Result<Zeroizing<Vec<u8>>, SealError> {
    let malformed = SealError::Malformed;
    let doc: Encrypted =
        serde_json::from_slice(body).map_err(|e| malformed(format!("encrypted key JSON: {e}")))?;
    if doc.kdf.name != "scrypt" {
        return Err(malformed(format!(
            "kdf.name is \"{}\", expected \"scrypt\"",
            doc.kdf.name
        )));
    }
    if doc.cipher.name != "nacl/secretbox" {
        return Err(malformed(format!(
            "cipher.name is \"{}\", expected \"nacl/secretbox\"",
            doc.cipher.name
        )));
    }
    let params = (doc.kdf.params.n, doc.kdf.params.r, doc.kdf.params.p);
    if !ACCEPTED_PARAMS.contains(&params) {
        return Err(malformed(format!(
            "kdf.params N={} r={} p={} are not one of the accepted sets (N 32768, 65536 or 131072 with r=8, p=1)",
            params.0, params.1, params.2
        )));
    }
    if doc.cipher.nonce.len() != NONCE_LEN {
        return Err(malformed(format!(
            "cipher.nonce is {} bytes, expected {NONCE_LEN}",
            doc.cipher.nonce.len()
        )));
    }
    if doc.ciphertext.len() < TAG_LEN {
        return Err(malformed("ciphertext is shorter than its tag".to_owned()));
    }
    let key = derive_key(password, &doc.kdf.salt, params);
    let cipher = XSalsa20Poly1305::new(key.as_ref().into());
    let (tag, sealed) = doc.ciphertext.split_at(TAG_LEN);
    let mut plain = Zeroizing::new(sealed.to_vec());
    cipher
        .decrypt_in_place_detached(
            doc.cipher.nonce.as_slice().into(),
            b"",
            &mut plain,
            tag.into(),
        )
        .map_err(|_| SealError::WrongPassword)?;
    Ok(plain)
}

/// Encrypts PKCS#8 DER into a complete `ENCRYPTED SIGSTORE PRIVATE KEY` PEM document.
pub(crate) fn encrypt_pem(pkcs8: &[u8], password: &[u8]) -> Result<Zeroizing<String>, SealError> {
    let mut salt = [0u8; SALT_LEN];
    let mut nonce = [0u8; NONCE_LEN];
    let rng = |buf: &mut [u8]| {
        getrandom::fill(buf).map_err(|e| SealError::Encode(format!("random source: {e}")))
    };
    rng(&mut salt)?;
    rng(&mut nonce)?;
    let key = derive_key(password, &salt, NEW_PARAMS);
    let cipher = XSalsa20Poly1305::new(key.as_ref().into());
    let mut sealed = Zeroizing::new(pkcs8.to_vec());
    let tag = cipher
        .encrypt_in_place_detached(nonce.as_slice().into(), b"", &mut sealed)
        .map_err(|_| SealError::Encode("secretbox sealing failed".to_owned()))?;
    let mut ciphertext = tag.to_vec();
    ciphertext.extend_from_slice(&sealed);
    let doc = Encrypted {
        kdf: Kdf {
            name: "scrypt".to_owned(),
            params: ScryptParams {
                n: NEW_PARAMS.0,
                r: NEW_PARAMS.1,
                p: NEW_PARAMS.2,
            },
            salt: salt.to_vec(),
        },
        cipher: Cipher {
            name: "nacl/secretbox".to_owned(),
            nonce: nonce.to_vec(),
        },
        ciphertext,
    };
    let json = serde_json::to_vec(&doc).expect("the key document serializes");
    let body = STANDARD.encode(&json);
    let mut pem = String::with_capacity(body.len() + 100);
    pem.push_str(&format!("-----BEGIN {LABEL}-----\n"));
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {LABEL}-----\n"));
    Ok(Zeroizing::new(pem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_cosign() {
        let pem = encrypt_pem(b"not really pkcs8", b"pw").unwrap();
        let (label, body) = pkcs8::der::pem::decode_vec(pem.as_bytes()).unwrap();
        assert_eq!(label, LABEL);
        let text = String::from_utf8(body.clone()).unwrap();
        assert!(
            text.starts_with(
                r#"{"kdf":{"name":"scrypt","params":{"N":65536,"r":8,"p":1},"salt":""#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#""cipher":{"name":"nacl/secretbox","nonce":""#),
            "{text}"
        );
        let doc: Encrypted = serde_json::from_slice(&body).unwrap();
        assert_eq!(doc.kdf.salt.len(), SALT_LEN);
        assert_eq!(doc.cipher.nonce.len(), NONCE_LEN);
        assert_eq!(doc.ciphertext.len(), b"not really pkcs8".len() + TAG_LEN);
        assert_eq!(&*decrypt(&body, b"pw").unwrap(), b"not really pkcs8");
    }

    #[test]
    fn costly_parameters_are_refused_before_work() {
        let pem = encrypt_pem(b"x", b"pw").unwrap();
        let (_, body) = pkcs8::der::pem::decode_vec(pem.as_bytes()).unwrap();
        let text = String::from_utf8(body)
            .unwrap()
            .replace("\"N\":65536", "\"N\":1048576");
        let e = decrypt(text.as_bytes(), b"pw").unwrap_err();
        assert!(
            matches!(&e, SealError::Malformed(d) if d.starts_with("kdf.params N=1048576")),
            "{e:?}"
        );
    }
}
