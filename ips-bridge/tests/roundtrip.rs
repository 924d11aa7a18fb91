//! Generated inputs (a stable-toolchain companion to the cargo-fuzz targets in `fuzz/`):
//! the parsers never panic, and whatever they accept is written back in a form that parses
//! to the same value.

use ips_bridge::{Action, Fmri, Manifest, Version};

/// xorshift64*: small, deterministic, good enough to mix tokens.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

const NAMES: &[&str] = &[
    "set",
    "file",
    "dir",
    "link",
    "hardlink",
    "license",
    "depend",
    "user",
    "group",
    "driver",
    "legacy",
    "signature",
    "unknown",
    "bogus",
];
const PIECES: &[&str] = &[
    " ",
    "  ",
    "\t",
    "\n",
    "=",
    "\"",
    "'",
    "\\",
    "\\\"",
    "\\'",
    "\\\\",
    "path",
    "name",
    "value",
    "hash",
    "data",
    "a",
    "b c",
    "é",
    "/",
    "x=y",
    "#",
    "fmri",
    "type",
    "require",
    "key",
    "0755",
    "\"\"",
    "''",
    "\" \"",
    "'a' 'b'",
    "\"x\" \"y\"",
    "ü\"q",
];

/// A value in one of the forms the grammar allows: unquoted, or quoted with either quote
/// (escaping the quote and backslashes), possibly followed by adjacent quoted strings.
fn value(rng: &mut Rng) -> String {
    const TEXT: &[&str] = &[
        "a", "b c", "é", "=", "\"", "'", "\\", "\t", "x y=z", "#", "",
    ];
    let mut raw = String::new();
    for _ in 0..(rng.next() % 4) {
        raw.push_str(rng.pick(TEXT));
    }
    match rng.next() % 3 {
        0 if !raw.is_empty() && !raw.contains([' ', '\t']) && !raw.starts_with(['"', '\'']) => raw,
        n => {
            let q = if n == 1 { '"' } else { '\'' };
            let esc: String = raw
                .chars()
                .flat_map(|c| match c {
                    '\\' => vec!['\\', '\\'],
                    c if c == q => vec!['\\', c],
                    c => vec![c],
                })
                .collect();
            let mut out = format!("{q}{esc}{q}");
            if rng.next().is_multiple_of(4) {
                out.push_str(rng.pick(&[" ", "", "\t"]));
                out.push_str(&format!("{q}z{q}"));
            }
            out
        }
    }
}

#[test]
fn generated_action_lines_round_trip() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let name = rng.pick(NAMES);
        let mut line = String::from(name);
        if matches!(name, "file" | "license" | "signature") && rng.next().is_multiple_of(2) {
            line.push_str(" 0a1b2c");
        }
        let key = match name {
            "set" | "driver" => "name",
            "depend" => "fmri",
            "user" => "username",
            "group" => "groupname",
            "license" => "license",
            "legacy" => "pkg",
            "signature" => "value",
            _ => "path",
        };
        for i in 0..(1 + rng.next() % 5) {
            line.push_str(rng.pick(&[" ", "  ", "\t", "\n"]));
            if rng.next().is_multiple_of(8) {
                line.push_str(rng.pick(PIECES));
                continue;
            }
            let k = if i == 0 {
                key
            } else {
                rng.pick(&["value", "mode", "hash", "a.b", "facet.x", "variant.y", key])
            };
            line.push_str(&format!("{k}={}", value(&mut rng)));
        }
        match Action::parse(&line) {
            Ok(a) => {
                accepted += 1;
                let written = a.to_string();
                let again = Action::parse(&written)
                    .unwrap_or_else(|e| panic!("{line:?} wrote {written:?}: {e}"));
                assert_eq!(again, a, "{line:?} wrote {written:?}");
            }
            Err(e) => assert!(
                e.column >= 1 && e.column <= line.chars().count() + 1,
                "{line:?}: {e}"
            ),
        }
    }
    assert!(
        accepted > 5_000,
        "the generator should produce valid actions too ({accepted})"
    );
}

#[test]
fn generated_manifests_never_panic() {
    let mut rng = Rng(42);
    for _ in 0..5_000 {
        let mut text = String::new();
        for _ in 0..(rng.next() % 6) {
            text.push_str(rng.pick(NAMES));
            for _ in 0..(rng.next() % 8) {
                text.push_str(rng.pick(PIECES));
            }
            text.push_str(rng.pick(&["\n", "\\\n", " \\\n  ", "\n#c\n", "\n\n"]));
        }
        let lines = text.split('\n').count();
        let (m, errors) = Manifest::parse_all(&text);
        for e in errors {
            assert!(e.line >= 1 && e.line <= lines, "{text:?}: {e}");
        }
        let again = Manifest::parse(&m.to_string()).unwrap();
        assert_eq!(again, m);
    }
}

#[test]
fn generated_fmris_and_versions_round_trip() {
    const PARTS: &[&str] = &[
        "pkg:/",
        "pkg://",
        "//",
        "/",
        "a",
        "web/server",
        "c++",
        "example.org/",
        "@",
        "1",
        "0",
        "01",
        ".",
        ",",
        "-",
        ":",
        "5.11",
        "20240102T030405Z",
        "20241302T030405Z",
        "T",
        "Z",
        " ",
    ];
    let mut rng = Rng(7);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let mut s = String::new();
        for _ in 0..(rng.next() % 8) {
            s.push_str(rng.pick(PARTS));
        }
        if let Ok(f) = Fmri::parse(&s) {
            accepted += 1;
            let printed = f.to_string();
            let again =
                Fmri::parse(&printed).unwrap_or_else(|e| panic!("{s:?} -> {printed:?}: {e}"));
            assert_eq!(again, f);
            assert_eq!(again.to_string(), printed);
        }
        if let Ok(v) = Version::parse(&s) {
            let again = Version::parse(&v.to_string()).unwrap();
            assert_eq!(again, v);
            assert_eq!(again.to_string(), v.to_string());
        }
    }
    assert!(accepted > 100, "{accepted}");
}
