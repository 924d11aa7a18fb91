use std::collections::BTreeMap;

use super::*;
use crate::intoto::{PREDICATE_SLSA_V1, PREDICATE_SPDX};
use crate::keys::generate;

pub(super) struct Keys(BTreeMap<PathBuf, VerifyingKey>);

impl Keys {
    pub(super) fn new(names: &[&str]) -> Self {
        Keys(
            names
                .iter()
                .map(|n| (PathBuf::from(n), generate().verifying().clone()))
                .collect(),
        )
    }

    pub(super) fn id(&self, name: &str) -> KeyId {
        self.0[Path::new(name)].key_id().clone()
    }

    pub(super) fn load(&self, text: &str) -> Result<Policy, PolicyError> {
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

pub(super) fn deny_reason(d: Decision) -> DenyReason {
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
        predicates: Vec::new(),
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
    let r = deny_reason(p.evaluate(prod, true, &ev(&two, &[(k.id("a.pub"), PREDICATE_SPDX)])));
    assert_eq!(
        r,
        DenyReason::MissingAttestation {
            missing: vec![AttestationType {
                name: "slsaprovenance1".to_owned(),
                uri: PREDICATE_SLSA_V1.to_owned()
            }]
        }
    );
    assert_eq!(
        r.to_string(),
        "missing attestation slsaprovenance1 (https://slsa.dev/provenance/v1)"
    );
    // Every missing type is named, by the policy's own name.
    let r = deny_reason(p.evaluate(prod, true, &ev(&two, &[])));
    assert_eq!(
        r.to_string(),
        "missing attestations spdxjson (https://spdx.dev/Document), slsaprovenance1 (https://slsa.dev/provenance/v1)"
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
        "127.0.0.1:5000/p/*",
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
        ("127.0.0.1:5000/p/unsigned:v1", 8),
        // An IPv4-mapped IPv6 literal is the IPv4 host it maps to (a dual-stack socket
        // reaches the same server), in every way it can be written.
        ("[::ffff:127.0.0.1]:5000/p/unsigned:v1", 8),
        ("[::FFFF:7f00:1]:5000/p/unsigned:v1", 8),
        ("[0:0:0:0:0:ffff:127.0.0.1]:5000/p/unsigned@sha256:00", 8),
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
        // IPv4-compatible (not mapped) and NAT64 addresses are other hosts.
        "[::127.0.0.1]:5000/p/unsigned",
        "[64:ff9b::7f00:1]:5000/p/unsigned",
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

/// An SPDX document as `rdctl build` writes it: one package per FMRI, the FMRI in an
/// `ips-fmri` external reference, the publisher as the supplier.
fn sbom(packages: &[(&str, &str)]) -> serde_json::Value {
    let packages: Vec<serde_json::Value> = packages
        .iter()
        .enumerate()
        .map(|(i, (name, version))| {
            serde_json::json!({
                "SPDXID": format!("SPDXRef-Package-{i}"),
                "name": name,
                "versionInfo": version,
                "supplier": "Organization: openindiana.org",
                "externalRefs": [{
                    "referenceCategory": "PACKAGE-MANAGER",
                    "referenceType": "ips-fmri",
                    "referenceLocator": format!("pkg://openindiana.org/{name}@{version}"),
                }],
            })
        })
        .collect();
    serde_json::json!({"spdxVersion": "SPDX-2.3", "name": "zones/app", "packages": packages})
}

fn provenance(builder: &str, digests: &[(&str, &str)]) -> serde_json::Value {
    let deps: Vec<serde_json::Value> = digests
        .iter()
        .map(|(alg, hex)| serde_json::json!({"uri": "git+https://src.example/app", "digest": {*alg: hex}}))
        .collect();
    serde_json::json!({
        "buildDefinition": {"buildType": "https://ci.example/build/v1", "externalParameters": {},
                            "resolvedDependencies": deps},
        "runDetails": {"builder": {"id": builder}},
    })
}

pub(super) fn signed_with(key: &KeyId, predicates: &[(&str, serde_json::Value)]) -> Evidence {
    Evidence {
        signatures: vec![key.clone()],
        attestations: predicates
            .iter()
            .map(|(t, _)| (key.clone(), t.to_string()))
            .collect(),
        predicates: predicates
            .iter()
            .map(|(t, p)| VerifiedPredicate {
                key: key.clone(),
                predicate_type: t.to_string(),
                predicate: p.clone(),
            })
            .collect(),
    }
}

const SOURCE: &str = "0123456789abcdef0123456789abcdef01234567";

fn content_policy(k: &Keys) -> Policy {
    k.load(&format!(
        r#"
[[rule]]
match = "r.example/sbom/*"
action = "signed"
keys = ["a.pub"]
deny_packages = ["openssl@<3.0", "pkg://openindiana.org/library/security/*@<1.2", "pkg:/web/curl"]

[[rule]]
match = "r.example/slsa/*"
action = "signed"
keys = ["a.pub"]
slsa_builder_id = "https://ci.example/builder"
slsa_source_digest = "sha1:{}"
"#,
        SOURCE.to_uppercase()
    ))
    .unwrap()
}

#[test]
fn deny_packages_refuses_what_the_sbom_lists() {
    let k = Keys::new(&["a.pub"]);
    let p = content_policy(&k);
    let a = k.id("a.pub");
    let img = "r.example/sbom/app:1";
    let eval = |e: &Evidence| p.evaluate(img, false, e);

    // Newer packages, and other packages, are admitted.
    let fine = sbom(&[
        (
            "library/security/openssl",
            "3.0.13,5.11-2024.0.0.0:20240101T000000Z",
        ),
        ("library/security/gnutls", "3.8.1"),
        ("shell/bash", "5.2"),
    ]);
    assert!(eval(&signed_with(&a, &[(PREDICATE_SPDX, fine)])).is_admit());

    // openssl 1.1.1 is below 3.0 in pkg(5) order; the name matches after a '/'.
    let r = deny_reason(eval(&signed_with(
        &a,
        &[(
            PREDICATE_SPDX,
            sbom(&[
                ("shell/bash", "5.2"),
                ("library/security/openssl", "1.1.1.20,5.11-2024.0.0.0"),
            ]),
        )],
    )));
    assert!(
        matches!(r, DenyReason::DeniedPackage { ref pattern, .. } if pattern == "openssl@<3.0"),
        "{r:?}"
    );
    assert_eq!(
        r.to_string(),
        "the SBOM lists library/security/openssl@1.1.1.20,5.11-2024.0.0.0 \
         (pkg://openindiana.org/library/security/openssl@1.1.1.20,5.11-2024.0.0.0), \
         refused by deny_packages \"openssl@<3.0\""
    );
    // 3.0.x is not < 3.0 (compared at the precision written), 2.9 is.
    assert!(
        eval(&signed_with(
            &a,
            &[(PREDICATE_SPDX, sbom(&[("openssl", "3.0.1")]))]
        ))
        .is_admit()
    );
    assert!(
        !eval(&signed_with(
            &a,
            &[(PREDICATE_SPDX, sbom(&[("openssl", "2.9")]))]
        ))
        .is_admit()
    );

    // A publisher-qualified glob; and a name with no constraint refuses every version.
    let r = deny_reason(eval(&signed_with(
        &a,
        &[(PREDICATE_SPDX, sbom(&[("library/security/sudo", "1.1.9")]))],
    )));
    assert!(
        r.to_string().ends_with(
            "refused by deny_packages \"pkg://openindiana.org/library/security/*@<1.2\""
        ),
        "{r}"
    );
    let r = deny_reason(eval(&signed_with(
        &a,
        &[(PREDICATE_SPDX, sbom(&[("web/curl", "8.5")]))],
    )));
    assert!(
        r.to_string()
            .ends_with("refused by deny_packages \"pkg:/web/curl\""),
        "{r}"
    );

    // A version that is not a pkg(5) version cannot clear a constraint: refused, and said so.
    let r = deny_reason(eval(&signed_with(
        &a,
        &[(PREDICATE_SPDX, sbom(&[("openssl", "1.1.1w-0+deb12u1")]))],
    )));
    assert!(
        matches!(r, DenyReason::PackageVersionUnknown { .. }),
        "{r:?}"
    );
    assert_eq!(r.code(), "package_version_unknown");
    assert!(
        r.to_string().contains(
            "without a pkg(5) version, so deny_packages \"openssl@<3.0\" cannot clear it"
        ),
        "{r}"
    );

    // No SBOM at all, or only one signed by a key outside the rule: refused as missing.
    let r = deny_reason(eval(&signed_with(&a, &[])));
    assert_eq!(
        r.to_string(),
        "no verified SPDX SBOM attestation (https://spdx.dev/Document) by the rule's keys, \
         which deny_packages \"openssl@<3.0\", \"pkg://openindiana.org/library/security/*@<1.2\", \"pkg:/web/curl\" needs"
    );
    let stranger = generate().verifying().key_id().clone();
    let mut ev = signed_with(&a, &[]);
    ev.attestations
        .push((stranger.clone(), PREDICATE_SPDX.to_owned()));
    ev.predicates.push(VerifiedPredicate {
        key: stranger,
        predicate_type: PREDICATE_SPDX.to_owned(),
        predicate: sbom(&[("openssl", "3.1")]),
    });
    assert!(matches!(
        deny_reason(eval(&ev)),
        DenyReason::MissingSbom { .. }
    ));

    // Two SBOMs by the rule's key: one listing a refused package is enough to refuse.
    let r = deny_reason(eval(&signed_with(
        &a,
        &[
            (PREDICATE_SPDX, sbom(&[("openssl", "3.1")])),
            (PREDICATE_SPDX, sbom(&[("openssl", "1.0.2")])),
        ],
    )));
    assert!(matches!(r, DenyReason::DeniedPackage { .. }), "{r:?}");

    // An SBOM predicate that is not an SPDX document.
    let r = deny_reason(eval(&signed_with(
        &a,
        &[(
            PREDICATE_SPDX,
            serde_json::json!({"bomFormat": "CycloneDX"}),
        )],
    )));
    assert!(matches!(r, DenyReason::UnreadableSbom { .. }), "{r:?}");
    assert!(
        r.to_string().contains("deny_packages cannot be checked"),
        "{r}"
    );
}

#[test]
fn slsa_conditions_need_one_provenance_that_says_both() {
    let k = Keys::new(&["a.pub"]);
    let p = content_policy(&k);
    let a = k.id("a.pub");
    let img = "r.example/slsa/app:1";
    let eval = |e: &Evidence| p.evaluate(img, false, e);
    let builder = "https://ci.example/builder";

    // The digest as written in the policy was upper case: compared in lower case.
    let good = provenance(builder, &[("sha256", &"ab".repeat(32)), ("sha1", SOURCE)]);
    assert!(eval(&signed_with(&a, &[(PREDICATE_SLSA_V1, good.clone())])).is_admit());

    let r = deny_reason(eval(&signed_with(&a, &[])));
    assert_eq!(
        r.to_string(),
        format!(
            "no verified SLSA v1 provenance (https://slsa.dev/provenance/v1) by the rule's keys, \
             which slsa_builder_id = \"{builder}\" and slsa_source_digest = \"sha1:{SOURCE}\" needs"
        )
    );
    assert!(matches!(r, DenyReason::MissingProvenance { .. }));

    let r = deny_reason(eval(&signed_with(
        &a,
        &[(
            PREDICATE_SLSA_V1,
            provenance("https://evil.example/builder", &[("sha1", SOURCE)]),
        )],
    )));
    assert_eq!(
        r.to_string(),
        format!(
            "the SLSA provenance names builder \"https://evil.example/builder\", \
             refused by slsa_builder_id = \"{builder}\""
        )
    );

    let other = "f".repeat(40);
    let r = deny_reason(eval(&signed_with(
        &a,
        &[(PREDICATE_SLSA_V1, provenance(builder, &[("sha1", &other)]))],
    )));
    assert_eq!(
        r,
        DenyReason::SlsaSourceMismatch {
            want: format!("sha1:{SOURCE}"),
            found: vec![format!("sha1:{other}")]
        }
    );
    assert_eq!(
        r.to_string(),
        format!(
            "no resolved dependency of the SLSA provenance has digest sha1:{SOURCE}, \
             required by slsa_source_digest (it lists sha1:{other})"
        )
    );

    // The builder from one provenance and the source from another do not add up.
    let r = deny_reason(eval(&signed_with(
        &a,
        &[
            (PREDICATE_SLSA_V1, provenance(builder, &[("sha1", &other)])),
            (
                PREDICATE_SLSA_V1,
                provenance("https://evil.example/builder", &[("sha1", SOURCE)]),
            ),
        ],
    )));
    assert!(matches!(r, DenyReason::SlsaSourceMismatch { .. }), "{r:?}");
    // Either one of two provenances may satisfy the rule.
    assert!(
        eval(&signed_with(
            &a,
            &[
                (
                    PREDICATE_SLSA_V1,
                    provenance("https://evil.example/builder", &[])
                ),
                (PREDICATE_SLSA_V1, good),
            ],
        ))
        .is_admit()
    );
}

#[test]
fn content_keys_are_checked_at_load() {
    let k = Keys::new(&["a.pub"]);
    let head = "[[rule]]\nmatch = \"x/*\"\naction = \"signed\"\nkeys = [\"a.pub\"]\n";
    for (body, starts) in [
        (
            "deny_packages = [\"openssl\",\n  \"openssl@<3.x\"]\n",
            "/etc/policy.toml:6: rule.0.deny_packages.1: \"openssl@<3.x\": constraint",
        ),
        (
            "deny_packages = [\"@<3.0\"]\n",
            "/etc/policy.toml:5: rule.0.deny_packages.0: \"@<3.0\" has no package name",
        ),
        (
            "deny_packages = [\"pkg:///openssl\"]\n",
            "/etc/policy.toml:5: rule.0.deny_packages.0: \"pkg:///openssl\": pkg://PUBLISHER/NAME needs a publisher",
        ),
        (
            "deny_packages = \"openssl\"\n",
            "/etc/policy.toml:5: rule.0.deny_packages: ",
        ),
        (
            "slsa_builder_id = \"\"\n",
            "/etc/policy.toml:5: rule.0.slsa_builder_id: \"\" is not a builder id",
        ),
        (
            "slsa_source_digest = \"0123\"\n",
            "/etc/policy.toml:5: rule.0.slsa_source_digest: \"0123\" is not ALGORITHM:HEX",
        ),
        (
            "slsa_source_digest = \"sha1:abc\"\n",
            "/etc/policy.toml:5: rule.0.slsa_source_digest: \"sha1:abc\": a sha1 digest has 40 hex digits, this one 3",
        ),
        (
            "slsa_source_digest = \"sha256:xyz\"\n",
            "/etc/policy.toml:5: rule.0.slsa_source_digest: \"sha256:xyz\": \"xyz\" is not hexadecimal",
        ),
    ] {
        let e = k.load(&format!("{head}{body}")).unwrap_err().to_string();
        assert!(e.starts_with(starts), "{body}: {e}");
    }
    let e = k
        .load("[[rule]]\nmatch = \"x/*\"\naction = \"accept\"\ndeny_packages = [\"openssl\"]\n")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "/etc/policy.toml:4: rule.0.deny_packages: only applies to action = \"signed\""
    );
    let e = k
        .load("[[rule]]\nmatch = \"x/*\"\naction = \"reject\"\nslsa_builder_id = \"https://ci\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rule.0.slsa_builder_id: only applies to action = \"signed\""),
        "{e}"
    );
}
