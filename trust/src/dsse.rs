//! DSSE v1 envelopes (Dead Simple Signing Envelope): what is signed is the pre-authentication
//! encoding of the payload type and body ([`pae`]), never the JSON around them.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};

use crate::keys::{KeyId, SigningKey, VerifyingKey};

/// The payload type of an in-toto statement, the only one cosign verifies.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The layer media type of a DSSE envelope in an attestation manifest.
pub const DSSE_MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";

/// An envelope could not be read or did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DsseError {
    /// The JSON is not a DSSE envelope.
    #[error("malformed DSSE envelope: {field}: {detail}")]
    Malformed {
        /// The field at fault (`payload`, `signatures[0].sig`, or `envelope`).
        field: String,
        /// What is wrong.
        detail: String,
    },
    /// The envelope carries no signature.
    #[error("DSSE envelope has no signatures")]
    NoSignature,
    /// No signature verified with any of the keys.
    #[error("no DSSE signature verifies with any of the {keys} key(s)")]
    BadSignature {
        /// How many keys were tried.
        keys: usize,
    },
}

/// `PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`, lengths in decimal
/// ASCII bytes.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let head = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    );
    let mut out = Vec::with_capacity(head.len() + payload.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(payload);
    out
}

/// One signature of an envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeSignature {
    /// An unauthenticated hint; cosign writes it empty.
    pub keyid: String,
    /// The raw signature bytes (DER ECDSA from this crate and cosign).
    pub sig: Vec<u8>,
}

/// A DSSE envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// What the payload is (`application/vnd.in-toto+json`).
    pub payload_type: String,
    /// The payload bytes (base64 on the wire).
    pub payload: Vec<u8>,
    /// The signatures over `pae(payload_type, payload)`.
    pub signatures: Vec<EnvelopeSignature>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    payload_type: String,
    payload: String,
    signatures: Vec<SigWire>,
}

#[derive(Serialize, Deserialize)]
struct SigWire {
    #[serde(default)]
    keyid: String,
    sig: String,
}

/// Decodes base64 in any of the forms DSSE allows producers to use.
fn decode_any(s: &str) -> Option<Vec<u8>> {
    [STANDARD, URL_SAFE, STANDARD_NO_PAD, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|e| e.decode(s).ok())
}

/// The payload and the key that verified it: only these bytes may be parsed afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified<'a> {
    /// The verified payload bytes.
    pub payload: &'a [u8],
    /// The key that verified them.
    pub key_id: KeyId,
}

impl Envelope {
    /// Signs `payload` as `payload_type` with one signature (empty `keyid`, as cosign does).
    pub fn sign(key: &SigningKey, payload_type: &str, payload: &[u8]) -> Self {
        let sig = key.sign_der(&pae(payload_type, payload));
        Envelope {
            payload_type: payload_type.to_owned(),
            payload: payload.to_vec(),
            signatures: vec![EnvelopeSignature {
                keyid: String::new(),
                sig,
            }],
        }
    }

    /// The envelope JSON (standard base64, field order `payloadType`, `payload`,
    /// `signatures`, as cosign writes it).
    pub fn to_json(&self) -> Vec<u8> {
        let wire = Wire {
            payload_type: self.payload_type.clone(),
            payload: STANDARD.encode(&self.payload),
            signatures: self
                .signatures
                .iter()
                .map(|s| SigWire {
                    keyid: s.keyid.clone(),
                    sig: STANDARD.encode(&s.sig),
                })
                .collect(),
        };
        serde_json::to_vec(&wire).expect("the envelope serializes")
    }

    /// Reads envelope JSON; unknown fields are ignored, base64 may be standard or URL-safe.
    pub fn from_json(bytes: &[u8]) -> Result<Self, DsseError> {
        let wire: Wire = serde_json::from_slice(bytes).map_err(|e| DsseError::Malformed {
            field: "envelope".to_owned(),
            detail: e.to_string(),
        })?;
        let payload = decode_any(&wire.payload).ok_or_else(|| DsseError::Malformed {
            field: "payload".to_owned(),
            detail: "not base64".to_owned(),
        })?;
        let signatures = wire
            .signatures
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                Ok(EnvelopeSignature {
                    sig: decode_any(&s.sig).ok_or_else(|| DsseError::Malformed {
                        field: format!("signatures[{i}].sig"),
                        detail: "not base64".to_owned(),
                    })?,
                    keyid: s.keyid,
                })
            })
            .collect::<Result<_, DsseError>>()?;
        Ok(Envelope {
            payload_type: wire.payload_type,
            payload,
            signatures,
        })
    }

    /// Verifies that some signature is by one of `keys`, over the PAE of this payload type
    /// and payload.
    pub fn verify(&self, keys: &[VerifyingKey]) -> Result<Verified<'_>, DsseError> {
        if self.signatures.is_empty() {
            return Err(DsseError::NoSignature);
        }
        let message = pae(&self.payload_type, &self.payload);
        for s in &self.signatures {
            if let Some(k) = keys.iter().find(|k| k.verify_der(&message, &s.sig)) {
                return Ok(Verified {
                    payload: &self.payload,
                    key_id: k.key_id().clone(),
                });
            }
        }
        Err(DsseError::BadSignature { keys: keys.len() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::generate;

    #[test]
    fn pae_matches_the_spec_example() {
        // DSSE protocol.md's test vector: type "http://example.com/HelloWorld", body
        // "hello world".
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
        assert_eq!(pae("", b""), b"DSSEv1 0  0 ".to_vec());
        assert!(
            pae(IN_TOTO_PAYLOAD_TYPE, b"{}")
                .starts_with(b"DSSEv1 28 application/vnd.in-toto+json 2 {}")
        );
    }

    #[test]
    fn sign_round_trip_verify() {
        let k = generate();
        let env = Envelope::sign(&k.signing, IN_TOTO_PAYLOAD_TYPE, b"{\"a\":1}");
        let json = env.to_json();
        let text = String::from_utf8(json.clone()).unwrap();
        assert!(text.starts_with(r#"{"payloadType":"application/vnd.in-toto+json","payload":"eyJhIjoxfQ==","signatures":[{"keyid":"","sig":""#), "{text}");
        let back = Envelope::from_json(&json).unwrap();
        assert_eq!(back, env);
        let v = back
            .verify(&[generate().verifying().clone(), k.verifying().clone()])
            .unwrap();
        assert_eq!(v.payload, b"{\"a\":1}");
        assert_eq!(&v.key_id, k.verifying().key_id());
    }

    #[test]
    fn tampering_and_wrong_key_fail() {
        let k = generate();
        let mut env = Envelope::sign(&k.signing, IN_TOTO_PAYLOAD_TYPE, b"{}");
        assert_eq!(
            env.verify(&[generate().verifying().clone()]),
            Err(DsseError::BadSignature { keys: 1 })
        );
        env.payload_type = "text/plain".to_owned();
        assert!(env.verify(&[k.verifying().clone()]).is_err());
        env.payload_type = IN_TOTO_PAYLOAD_TYPE.to_owned();
        env.payload = b"{ }".to_vec();
        assert!(env.verify(&[k.verifying().clone()]).is_err());
        env.signatures.clear();
        assert_eq!(
            env.verify(&[k.verifying().clone()]),
            Err(DsseError::NoSignature)
        );
    }

    #[test]
    fn url_safe_base64_is_read() {
        let json = br#"{"payloadType":"t","payload":"-_8","signatures":[{"sig":"AA"}],"extra":1}"#;
        let env = Envelope::from_json(json).unwrap();
        assert_eq!(env.payload, vec![0xfb, 0xff]);
        assert_eq!(env.signatures[0].keyid, "");
        let e = Envelope::from_json(br#"{"payloadType":"t","payload":"!","signatures":[]}"#)
            .unwrap_err();
        assert!(e.to_string().contains("payload"), "{e}");
    }
}
