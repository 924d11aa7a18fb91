use std::collections::BTreeMap;

use super::*;
use crate::intoto::{PREDICATE_SLSA_V1, PREDICATE_SPDX};
use crate::keys::generate;

struct Keys(BTreeMap<PathBuf, VerifyingKey>);

impl Keys {
    fn new(names: &[&str]) -> Self {
        Keys(
            names
                .iter()
                .map(|n| (PathBuf::from(n), generate().verifying().clone()))
                .collect(),
        )
    }

    fn id(&self, name: &str) -> KeyId {
        self.0[Path::new(name)].key_id().clone()
    }

    fn load(&self, text: &str) -> Result<Policy, PolicyError> {
        Policy::from_toml(text, Path::new("/etc/policy.toml"), &mut |p| {
            self.0.get(p).cloned().ok_or_else(|| {
                KeyFileError::Io(std::io::Error::new(std::io::ErrorKind::NotFound, "missing"))
            })
        })
    }
}

const POLICY: &str = r#"
[[rule]]
match = "r.example/prod/**"
action = "signed"
keys = ["a.pub", "b.pub", "c.pub"]
threshold = 2
require_attestations = ["spdxjson", "slsaprovenance1"]
require_digest_pin = true

[[rule]]
match = "r.example/dev/*"
action = "signed"
keys = ["a.pub"]

[[rule]]
match = "r.example/public/*"
action = "accept"

[[rule]]
match = "r.example/**"
action = "reject"
"#;

fn policy() -> (Keys, Policy) {
    let keys = Keys::new(&["a.pub", "b.pub", "c.pub"]);
    let p = keys.load(POLICY).unwrap();
    (keys, p)
}

fn deny_reason(d: Decision) -> DenyReason {
    match d {
        Decision::Deny { reason, .. } => reason,
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[test]
fn first_match_wins_and_default_rejects() {
    let (_, p) = policy();
    assert_eq!(p.rule_for("r.example/dev/app:1").unwrap().index, 1);
    assert_eq!(p.rule_for("r.example/dev/team/app").unwrap().index, 3);
    assert!(
        p.evaluate("r.example/public/x:latest", false, &Evidence::default())
            .is_admit()
    );
    assert_eq!(
        deny_reason(p.evaluate("r.example/other", false, &Evidence::default())),
        DenyReason::RejectedByRule
    );
    assert_eq!(
        deny_reason(p.evaluate("elsewhere.example/app", true, &Evidence::default())),
        DenyReason::NoRuleMatches
    );
    assert!(
        Policy::accept_all()
            .evaluate("x/y", false, &Evidence::default())
            .is_admit()
    );
    let k = Keys::new(&[]);
    let open = k.load("default = \"accept\"\n").unwrap();
    assert!(open.evaluate("x/y", false, &Evidence::default()).is_admit());
}

#[test]
fn keys_for() {
    let (k, p) = policy();
    assert_eq!(p.keys_for("r.example/prod/a/b@sha256:00").len(), 3);
    assert_eq!(p.keys_for("r.example/dev/app")[0].key_id(), &k.id("a.pub"));
    assert!(p.keys_for("r.example/public/app").is_empty());
    assert!(p.keys_for("nowhere/app").is_empty());
}

#[test]
fn signed_rule_reasons() {
    let (k, p) = policy();
    let prod = "r.example/prod/app@sha256:00";
    let stranger = generate().verifying().key_id().clone();
    let ev = |sigs: &[KeyId], atts: &[(KeyId, &str)]| Evidence {
        signatures: sigs.to_vec(),
        attestations: atts
            .iter()
            .map(|(k, t)| (k.clone(), t.to_string()))
            .collect(),
    };
    assert_eq!(
        deny_reason(p.evaluate(prod, false, &ev(&[], &[]))),
        DenyReason::NotPinned
    );
    assert_eq!(
        deny_reason(p.evaluate(prod, true, &ev(&[], &[]))),
        DenyReason::Unsigned
    );
    assert!(matches!(
        deny_reason(p.evaluate(prod, true, &ev(std::slice::from_ref(&stranger), &[]))),
        DenyReason::UnknownKey { .. }
    ));
    // The same key twice counts once.
    let r = deny_reason(p.evaluate(
        prod,
        true,
        &ev(&[k.id("a.pub"), k.id("a.pub"), stranger], &[]),
    ));
    assert_eq!(
        r,
        DenyReason::ThresholdNotMet {
            have: 1,
            need: 2,
            of: 3,
            signed_by: vec![k.id("a.pub")]
        }
    );
    assert!(
        r.to_string()
            .starts_with("signed by 1 of 3 keys, 2 needed (signed by sha256:"),
        "{r}"
    );
    let two = [k.id("a.pub"), k.id("c.pub")];
    assert_eq!(
        deny_reason(p.evaluate(prod, true, &ev(&two, &[(k.id("a.pub"), PREDICATE_SPDX)]))),
        DenyReason::MissingAttestation {
            predicate_type: PREDICATE_SLSA_V1.to_owned()
        }
    );
    // An attestation by a key outside the rule does not count.
    let outsider = generate().verifying().key_id().clone();
    assert!(matches!(
        deny_reason(p.evaluate(
            prod,
            true,
            &ev(
                &two,
                &[
                    (k.id("a.pub"), PREDICATE_SPDX),
                    (outsider, PREDICATE_SLSA_V1)
                ]
            )
        )),
        DenyReason::MissingAttestation { .. }
    ));
    let d = p.evaluate(
        prod,
        true,
        &ev(
            &two,
            &[
                (k.id("a.pub"), PREDICATE_SPDX),
                (k.id("b.pub"), PREDICATE_SLSA_V1),
            ],
        ),
    );
    match d {
        Decision::Admit {
            rule,
            keys,
            attestations,
        } => {
            assert_eq!(rule.unwrap().index, 0);
            assert_eq!(keys.len(), 2);
            assert_eq!(
                attestations,
                vec![PREDICATE_SPDX.to_owned(), PREDICATE_SLSA_V1.to_owned()]
            );
        }
        other => panic!("{other:?}"),
    }
    // Threshold defaults to 1.
    assert!(
        p.evaluate("r.example/dev/app:1", false, &ev(&[k.id("a.pub")], &[]))
            .is_admit()
    );
}

#[test]
fn load_errors_name_file_line_and_field() {
    let k = Keys::new(&["a.pub"]);
    let e = k
        .load("[[rule]]\nmatch = \"x/*\"\naction = \"maybe\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("/etc/policy.toml:3: rule.0.action: unknown value \"maybe\""),
        "{e}"
    );

    let e = k
        .load("[[rule]]\nmatch = \"x/*\"\naction = \"signed\"\nkeys = [\"a.pub\"]\nthreshold = 0\n")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "/etc/policy.toml:5: rule.0.threshold: must be between 1 and the number of keys (1)"
    );

    let e = k
        .load("[[rule]]\nmatch = \"x/*\"\naction = \"signed\"\nkeys = [\"a.pub\"]\nthreshold = 2\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("rule.0.threshold"), "{e}");

    let e = k
        .load(
            "[[rule]]\nmatch = \"x/*\"\naction = \"signed\"\nkeys = [\"a.pub\",\n  \"gone.pub\"]\n",
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "/etc/policy.toml:5: rule.0.keys.1: cannot read key file gone.pub"
    );

    let e = k
        .load("[[rule]]\nmatch = \"x/*\"\naction = \"signed\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rule.0.keys: action = \"signed\" needs at least one key"),
        "{e}"
    );

    let e = k
        .load("[[rule]]\nmatch = \"x/*\"\naction = \"accept\"\nkeys = [\"a.pub\"]\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rule.0.keys: only applies to action = \"signed\""),
        "{e}"
    );

    let e = k
        .load("[[rule]]\nmatch = \"x/*\"\naction = \"signed\"\nkeys = [\"a.pub\"]\nrequire_attestations = [\"sbom\"]\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rule.0.require_attestations.0: unknown attestation type \"sbom\""),
        "{e}"
    );

    let e = k
        .load("[[rule]]\nmatch = \"x/*\"\naction = \"signed\"\nkeys = [\"a.pub\", \"a.pub\"]\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rule.0.keys.1: key a.pub is listed twice"),
        "{e}"
    );
}

#[test]
fn load_reads_keys_relative_to_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("keys")).unwrap();
    let key = generate();
    std::fs::write(
        dir.path().join("keys/release.pub"),
        key.verifying().to_pem(),
    )
    .unwrap();
    std::fs::write(dir.path().join("keys/bad.pub"), "not a key").unwrap();
    let path = dir.path().join("policy.toml");
    std::fs::write(
        &path,
        "[[rule]]\nmatch = \"**\"\naction = \"signed\"\nkeys = [\"keys/release.pub\"]\n",
    )
    .unwrap();
    let p = Policy::load(&path).unwrap();
    assert_eq!(p.keys_for("any/thing")[0], *key.verifying());

    std::fs::write(
        &path,
        "[[rule]]\nmatch = \"**\"\naction = \"signed\"\nkeys = [\"keys/bad.pub\"]\n",
    )
    .unwrap();
    let e = Policy::load(&path).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("rule.0.keys.0: cannot read key file keys/bad.pub"),
        "{e}"
    );
    let cause = std::error::Error::source(&e).unwrap().to_string();
    assert!(cause.contains("bad.pub: not a PEM key file"), "{cause}");
}

/// Every spelling of a registry host or a Docker Hub name selects the rule written for its
/// canonical spelling, whichever spelling the rule's pattern uses: with `default = "accept"`,
/// a variant that missed the `signed` rule would be admitted unsigned.
#[test]
fn no_spelling_of_a_reference_dodges_its_rule() {
    let k = Keys::new(&["a.pub"]);
    let patterns = [
        "localhost:5000/app*",
        "LOCALHOST:5000/app*",
        "LocalHost.:5000/app*",
        "reg.example/prod/**",
        "REG.example:443/prod/**",
        "docker.io/nginx",
        "index.docker.io/library/nginx",
        "[0:0:0:0:0:0:0:1]:5000/app",
    ];
    let text: String = patterns
        .iter()
        .map(|p| format!("[[rule]]\nmatch = \"{p}\"\naction = \"signed\"\nkeys = [\"a.pub\"]\n\n"))
        .collect();
    let p = k.load(&format!("default = \"accept\"\n\n{text}")).unwrap();
    for (reference, rule) in [
        ("localhost:5000/app", 0),
        ("LOCALHOST:5000/app:1", 0),
        ("LocalHost:5000/app-web@sha256:00", 0),
        ("localhost.:5000/app", 0),
        ("localhost:05000/app", 0),
        ("reg.example/prod/a/b:1", 3),
        ("REG.EXAMPLE/prod/a", 3),
        ("reg.example:443/prod/a", 3),
        ("reg.example.:443/prod/a", 3),
        ("reg.example:80/prod/a", 3),
        ("docker.io/nginx:1.25", 5),
        ("docker.io/library/nginx", 5),
        ("index.docker.io/nginx", 5),
        ("registry-1.docker.io/library/nginx@sha256:00", 5),
        ("Docker.IO/nginx", 5),
        ("[::1]:5000/app", 7),
        ("[0::1]:5000/app:1", 7),
    ] {
        let found = p.rule_for(reference).map(|r| r.index);
        assert_eq!(found, Some(rule), "{reference}");
        let d = p.evaluate(reference, true, &Evidence::default());
        assert_eq!(deny_reason(d), DenyReason::Unsigned, "{reference}");
    }
    // Other registries and other repositories are not caught by accident.
    for other in [
        "localhost:5001/app",
        "reg.example:8443/prod/a",
        "docker.io/team/nginx",
        "[::2]:5000/app",
    ] {
        assert!(p.rule_for(other).is_none(), "{other}");
    }
}

/// A pattern that could never match a canonical name (a trailing `/`, upper case in the
/// repository path, a glob host with a default port) is refused at load, naming the rule:
/// otherwise a `signed` rule would silently protect nothing.
#[test]
fn patterns_that_match_nothing_are_refused() {
    let k = Keys::new(&["a.pub"]);
    for (pattern, says) in [
        ("reg.example/prod/", "ends with '/'"),
        ("reg.example/Prod/*", "repository paths are lower case"),
        ("*.example:443/**", "default port"),
        ("reg..example/app", "no empty label"),
    ] {
        let e = k
            .load(&format!(
                "[[rule]]\nmatch = \"{pattern}\"\naction = \"signed\"\nkeys = [\"a.pub\"]\n"
            ))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rule.0.match") && e.contains(says),
            "{pattern}: {e}"
        );
    }
}
