//! Any bytes as signature or attestation evidence from a registry: an error, never a panic, and
//! never a verified result under a key that signed nothing here.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use trust::cosign::{SimpleSigning, parse_layers, signature_layers, verify_signature_layer};
use trust::dsse::Envelope;
use trust::{KeyPair, VerifyingKey, attestation};
use validator::Digest;

/// One key for the whole run (generating one per input would dominate the time).
fn key() -> &'static KeyPair {
    static KEY: OnceLock<KeyPair> = OnceLock::new();
    KEY.get_or_init(trust::generate)
}

fuzz_target!(|data: &[u8]| {
    let keys = [key().verifying().clone()];
    let subject = Digest::parse(&format!("sha256:{}", "ab".repeat(32))).unwrap();
    // A `.sig` or `.att` manifest, then each layer with the same bytes as its payload.
    if let Ok(layers) = parse_layers(data) {
        for l in &layers {
            assert!(verify_signature_layer(&keys, l, data, &subject).is_err());
            assert!(attestation::verify_attestation_layer(&keys, l, data, &subject).is_err());
        }
    }
    let _ = signature_layers(data);
    let _ = attestation::attestation_layers(data);
    let _ = SimpleSigning::parse(data);
    if let Ok(env) = Envelope::from_json(data) {
        assert!(env.verify(&keys).is_err(), "a forged envelope verified");
        // What parses serializes and parses back to the same envelope.
        let again = Envelope::from_json(&env.to_json()).expect("our own JSON parses");
        assert_eq!(again.to_json(), env.to_json());
    }
    let _ = VerifyingKey::from_pem(data, "fuzz.pub");
});
