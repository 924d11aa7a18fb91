//! Any text: the FMRI and version parsers never panic, and what they accept prints in a
//! form that parses back to an equal value with the same text.
#![no_main]

use ips_bridge::{Fmri, Version};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(f) = Fmri::parse(text) {
        let printed = f.to_string();
        let again = Fmri::parse(&printed).expect("printed FMRIs parse");
        assert_eq!(again, f);
        assert_eq!(again.to_string(), printed);
        let _ = (f.dir_path(), f.url_path());
    }
    if let Ok(v) = Version::parse(text) {
        let again = Version::parse(&v.to_string()).expect("printed versions parse");
        assert_eq!(again, v);
        assert_eq!(again.build(), v.build());
    }
});
