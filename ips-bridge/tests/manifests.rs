//! Manifests shaped like real ones parse, convert to typed actions and serialise back to an
//! equivalent manifest.

use std::path::Path;

use ips_bridge::{Action, ActionKind, ImageFilter, Manifest, TypedAction, resolve_hardlink};

fn load(name: &str) -> Manifest {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/manifests")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    Manifest::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn check_round_trip(name: &str) -> Manifest {
    let m = load(name);
    for a in m.actions() {
        a.typed().unwrap_or_else(|e| panic!("{name}: {a}: {e}"));
    }
    let written = m.to_string();
    let again = Manifest::parse(&written).unwrap();
    assert_eq!(again, m, "{name}");
    assert_eq!(again.to_string(), written, "{name}: writing is stable");
    m
}

#[test]
fn sunwcs_like_manifest() {
    let m = check_round_trip("sunwcs-like.p5m");
    let passwd = m
        .actions()
        .iter()
        .find(|a| a.key() == Some("etc/passwd"))
        .unwrap();
    assert_eq!(passwd.get("preserve"), Some("true"));
    assert_eq!(passwd.get("timestamp"), Some("19700101T000000Z"));
    assert_eq!(
        passwd.get("chash"),
        Some("1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b")
    );
    let edit = m.by_kind(ActionKind::Hardlink).next().unwrap();
    assert_eq!(
        resolve_hardlink(edit.key().unwrap(), edit.get("target").unwrap()).as_deref(),
        Some("usr/has/bin/edit")
    );
    let users: Vec<_> = m
        .by_kind(ActionKind::User)
        .map(|a| a.key().unwrap())
        .collect();
    assert_eq!(users, ["root", "daemon"]);
    let daemon = m.by_kind(ActionKind::User).nth(1).unwrap();
    assert_eq!(daemon.get("gcos-field"), Some(""));
    let legacy = m.by_kind(ActionKind::Legacy).next().unwrap();
    assert_eq!(legacy.get("name"), Some("Core Solaris, (Root)"));
    // The zone filter drops the global-only file and keeps the nonglobal-only dependency.
    let zone = ImageFilter::zone("i386");
    let kept: Vec<&Action> = m.actions().iter().filter(|a| zone.allows(a)).collect();
    assert!(!kept.iter().any(|a| a.key() == Some("etc/system")));
    assert!(kept.iter().any(|a| a.get("type") == Some("parent")));
    assert_eq!(m.actions().len() - kept.len(), 1);
}

#[test]
fn driver_manifest_with_aliases() {
    let m = check_round_trip("driver-e1000g-like.p5m");
    let d = m.by_kind(ActionKind::Driver).next().unwrap();
    match d.typed().unwrap() {
        TypedAction::Driver { name, aliases } => {
            assert_eq!(name, "e1000g");
            assert_eq!(
                aliases,
                [
                    "pci8086,1000",
                    "pci8086,1001",
                    "pciex8086,10d3",
                    "pciex8086,150c"
                ]
            );
        }
        t => panic!("{t:?}"),
    }
    assert_eq!(d.get("perms"), Some("* 0666 root sys"));
    // In a zone only the set, driver (a no-op there), legacy and license actions remain.
    let zone = ImageFilter::zone("i386");
    assert_eq!(
        m.actions().iter().filter(|a| zone.allows(a)).count(),
        4 + 1 + 1 + 2
    );
}

#[test]
fn published_manifest_with_content_hashes() {
    let m = check_round_trip("published-nginx-like.p5m");
    let f = m.by_kind(ActionKind::File).next().unwrap();
    assert_eq!(f.get_all("pkg.content-hash").len(), 4);
    assert_eq!(f.hash(), Some("6d5f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e98"));
    let any = m
        .actions()
        .iter()
        .find(|a| a.get("type") == Some("require-any"))
        .unwrap();
    assert_eq!(any.get_all("fmri").len(), 2);
    let sig = m.by_kind(ActionKind::Signature).next().unwrap();
    assert_eq!(sig.key(), Some("abcdef0123"));
    // Incorporations are dropped by facet.version-lock.*=false.
    let unlocked = ImageFilter::zone("i386").facet("version-lock.*", false);
    assert!(
        !m.actions()
            .iter()
            .filter(|a| unlocked.allows(a))
            .any(|a| a.get("type") == Some("incorporate"))
    );
}

#[test]
fn real_shaped_manifests_do_not_conflict_in_a_zone() {
    let set: Vec<(ips_bridge::Fmri, Manifest)> = [
        "sunwcs-like.p5m",
        "driver-e1000g-like.p5m",
        "published-nginx-like.p5m",
    ]
    .iter()
    .map(|n| {
        let m = load(n);
        (m.fmri().unwrap().unwrap(), m)
    })
    .collect();
    let zone = ImageFilter::zone("i386");
    assert_eq!(ips_bridge::check_conflicts(&set, &zone), []);
    // Their dependencies point outside this set, which the checks report.
    let deps = ips_bridge::check_pinned_set(&set, &zone);
    assert!(
        deps.iter()
            .any(|p| p.message.contains("system/library is not in the set")),
        "{deps:?}"
    );
    assert!(
        deps.iter()
            .any(|p| p.message.contains("library/pcre is not in the set"))
    );
}
