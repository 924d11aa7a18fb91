//! Any text: the manifest parser never panics, and every action it accepts is written in a
//! form that parses back to the same action.
#![no_main]

use ips_bridge::{Action, Manifest};
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
});
