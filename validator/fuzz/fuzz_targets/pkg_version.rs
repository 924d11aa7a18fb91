//! Two lines as pkg(5) versions and constraints: errors or a consistent order, never a panic.
#![no_main]

use std::cmp::Ordering;

use libfuzzer_sys::fuzz_target;
use validator::{Constraint, PkgVersion};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (a, b) = text.split_once('\n').unwrap_or((text, text));
    if let (Ok(x), Ok(y)) = (PkgVersion::parse(a), PkgVersion::parse(b)) {
        assert_eq!(x.cmp_full(&y), y.cmp_full(&x).reverse(), "{a:?} {b:?}");
        assert_eq!(x.cmp_full(&x), Ordering::Equal, "{a:?}");
        // A version always satisfies `=` itself at its own precision.
        let eq = Constraint::parse(&format!("={a}")).expect("a parsed version is a constraint");
        assert!(eq.matches(a), "{a:?} does not match itself");
    }
    if let Ok(c) = Constraint::parse(a) {
        let _ = c.matches(b);
    }
});
