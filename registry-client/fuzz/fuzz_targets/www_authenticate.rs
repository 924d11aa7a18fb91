//! The WWW-Authenticate parser on arbitrary input: it never panics, respects its bounds, and
//! whatever it accepts selects without panicking either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use registry_client::challenge;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cs) = challenge::parse(s) {
        assert!(!cs.is_empty() && cs.len() <= challenge::MAX_CHALLENGES);
        for c in &cs {
            assert!(c.params.len() <= challenge::MAX_PARAMS);
            assert!(!c.scheme.is_empty());
        }
        let _ = challenge::select(&cs);
    }
});
