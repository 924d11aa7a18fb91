//! Any text: the manifest parser never panics, and every action it accepts is written in a
//! form that parses back to the same action. Signature actions are read, their signed text
//! built, and the whole manifest checked under `require-signatures` with the input itself
//! served as every certificate (the PEM and X.509 parsers see the fuzzer's bytes too): no
//! panic, and never a pass for a manifest without a signature that verified.
#![no_main]

use ips_bridge::{
    Action, ActionKind, Manifest, SignatureAction, SignaturePolicy, TrustAnchors,
    signed_message, verify_manifest,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (manifest, errors) = Manifest::parse_all(text);
    for e in &errors {
        assert!(e.line >= 1 && e.column >= 1);
    }
    for action in manifest.actions() {
        let written = action.to_string();
        let again = Action::parse(&written).expect("written actions parse");
        assert_eq!(&again, action, "{written}");
        let _ = action.typed();
    }
    for sig in manifest.by_kind(ActionKind::Signature) {
        let _ = SignatureAction::parse(sig);
        let _ = signed_message(&manifest, sig);
    }
    let anchors = TrustAnchors::from_pem(data, "fuzz input").ok();
    let mut fetch = |_: &Action| -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>> {
        Ok(data.to_vec())
    };
    if let Ok(report) = verify_manifest(
        &manifest,
        SignaturePolicy::RequireSignatures,
        anchors.as_ref(),
        &mut fetch,
    ) {
        assert!(!report.signed_by.is_empty());
    }
});
