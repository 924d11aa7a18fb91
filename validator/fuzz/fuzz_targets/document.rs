//! Any bytes as a manifest, index or config: a report, never a panic; a document that passes
//! must pass again when checked as the kind it was read as.
#![no_main]

use libfuzzer_sys::fuzz_target;
use validator::{Document, DocumentKind, check_document};

fuzz_target!(|data: &[u8]| {
    let (report, doc) = check_document(data, None, None, "fuzz");
    assert_eq!(report.is_ok(), doc.is_some() || report.is_ok());
    if let Some(doc) = doc {
        let kind = match doc {
            Document::Manifest(_) => DocumentKind::Manifest,
            Document::Index(_) => DocumentKind::Index,
            Document::Config(_) => DocumentKind::Config,
        };
        let (again, _) = check_document(data, Some(kind), None, "fuzz");
        assert!(again.is_ok(), "{again}");
    }
    for kind in [DocumentKind::Manifest, DocumentKind::Index, DocumentKind::Config] {
        let _ = check_document(data, Some(kind), None, "fuzz");
    }
});
