//! Any bytes as a plain-tar layer (digest and size made to match, so the tar checks run): a
//! report, never a panic, and a DiffID that equals the hash of the bytes whenever the walk
//! reached the end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use validator::{Descriptor, Digest, LayerLimits, MediaType, Report, check_layer};

fuzz_target!(|data: &[u8]| {
    let desc = Descriptor {
        media_type: MediaType::OciLayerTar,
        digest: Digest::sha256(data),
        size: data.len() as u64,
        platform: None,
        annotations: Default::default(),
        artifact_type: None,
        data: None,
        urls: Vec::new(),
    };
    let mut report = Report::new();
    let summary = check_layer(data, &desc, None, &LayerLimits::default(), "fuzz", &mut report);
    if let Some(diff_id) = summary.diff_id {
        assert_eq!(diff_id, Digest::sha256(data));
    }
});
