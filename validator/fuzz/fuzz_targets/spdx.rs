//! Any bytes as an SPDX SBOM pushed to the registry: its packages or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = validator::parse_spdx(data);
});
