//! `rdctl registry retention` and `rdctl registry usage` end to end on a filesystem store, next
//! to a serving `rdctl registry serve` with the same configuration: the dry run prints what
//! would go and why and changes nothing, the real run removes exactly that, and usage reports
//! what the pushes counted, with the quota's limits; and the server applies retention on its
//! garbage collection schedule, after which the collection reclaims the bytes.

use std::time::{Duration, Instant};

use crate::registry_gc::{digest, get, push_image};
use crate::util::{Server, ok, rdctl, s, tempdir};

const CONFIG: &str = r#"
[[quota]]
repositories = ["ci/**"]
max_manifests = 10
max_bytes = 100000

[[retention]]
repositories = ["ci/**"]
keep_newest = 1
keep_tags = ["release-*"]
"#;

fn json(args: &[&str]) -> serde_json::Value {
    let out = ok(rdctl().args(args));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?} --json: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn retention_dry_run_lists_what_the_real_run_removes_and_usage_counts_pushes() {
    let dir = tempdir();
    let data = dir.path().join("data");
    let config = dir.path().join("registry.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let server = Server::start(&data, &["--config", s(&config)]);
    let repo = "ci/app";
    let old = push_image(&server, repo, "pr-1", b"{\"c\":1}", b"layer 1");
    let old2 = push_image(&server, repo, "pr-2", b"{\"c\":2}", b"layer 2");
    let release = push_image(&server, repo, "release-1", b"{\"c\":3}", b"layer 3");
    let newest = push_image(&server, repo, "pr-3", b"{\"c\":4}", b"layer 4");

    let store = ["--config", s(&config), "--data", s(&data)];
    let usage = json(&[&["registry", "usage", "--json"][..], &store].concat());
    let u = &usage["repositories"].as_array().unwrap()[0];
    assert_eq!(
        (
            u["repository"].as_str(),
            u["manifests"].as_u64(),
            u["max_manifests"].as_u64()
        ),
        (Some(repo), Some(4), Some(10)),
        "{usage:#}"
    );
    assert_eq!(u["rule"], "quota[0]");
    assert_eq!(u["tracked"], true);

    let text = ok(rdctl().args([&["registry", "retention", "--dry-run"][..], &store].concat()));
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("dry run: nothing removed"), "{text}");
    assert!(
        text.contains("would remove 2 tags and 2 manifests"),
        "{text}"
    );
    assert!(
        text.contains(&format!("tag ci/app:pr-1 {old} (retention[0]: pushed ")),
        "{text}"
    );
    assert!(text.contains("not among the newest 1"), "{text}");
    let dry = json(
        &[
            &["registry", "retention", "--dry-run", "--json"][..],
            &store,
        ]
        .concat(),
    );
    assert_eq!(get(&server, &format!("/v2/{repo}/manifests/pr-1")), 200);

    let real = json(&[&["registry", "retention", "--json"][..], &store].concat());
    assert_eq!(real["dry_run"], false);
    let strip = |v: &serde_json::Value| -> Vec<(String, String)> {
        v["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["tag"].as_str().unwrap().to_owned(),
                    t["digest"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(strip(&dry), strip(&real));
    assert_eq!(dry["manifests"], real["manifests"]);
    assert_eq!(
        strip(&real),
        vec![
            ("pr-1".to_owned(), old.clone()),
            ("pr-2".to_owned(), old2.clone())
        ]
    );
    for (tag, code) in [
        ("pr-1", 404),
        ("pr-2", 404),
        ("release-1", 200),
        ("pr-3", 200),
    ] {
        assert_eq!(
            get(&server, &format!("/v2/{repo}/manifests/{tag}")),
            code,
            "{tag}"
        );
    }
    assert_eq!(get(&server, &format!("/v2/{repo}/manifests/{old}")), 404);
    assert_eq!(
        get(&server, &format!("/v2/{repo}/manifests/{release}")),
        200
    );
    assert_eq!(get(&server, &format!("/v2/{repo}/manifests/{newest}")), 200);

    // The deleted manifests left the usage document; a recount agrees.
    let usage = json(&[&["registry", "usage", "--json", "--recount"][..], &store].concat());
    assert_eq!(usage["repositories"][0]["manifests"], 2, "{usage:#}");
}

/// The server applies retention on its `gc.interval` schedule, right before each collection,
/// and the collection then reclaims the removed image's bytes.
#[test]
fn the_server_applies_retention_before_each_scheduled_collection() {
    let dir = tempdir();
    let data = dir.path().join("data");
    let config = dir.path().join("registry.toml");
    std::fs::write(
        &config,
        "[gc]\ninterval = \"1s\"\ngrace = \"3s\"\n\n\
         [[retention]]\nrepositories = [\"sched/**\"]\nkeep_newest = 1\n",
    )
    .unwrap();
    let server = Server::start(&data, &["--config", s(&config)]);
    let repo = "sched/app";
    let old = push_image(&server, repo, "old", b"{\"s\":1}", b"scheduled old layer");
    push_image(&server, repo, "new", b"{\"s\":2}", b"scheduled new layer");
    let layer = digest(b"scheduled old layer");
    let layer_file = data
        .join("blobs/sha256")
        .join(&layer[7..9])
        .join(&layer[7..])
        .join("data");
    assert!(layer_file.exists(), "{}", layer_file.display());
    // Retention removes the old tag and manifest at the first tick; the collection reclaims
    // the bytes once they are older than the 3 s grace window.
    let deadline = Instant::now() + Duration::from_secs(30);
    while layer_file.exists() {
        assert!(
            Instant::now() < deadline,
            "the old layer was not reclaimed; log:\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(get(&server, &format!("/v2/{repo}/manifests/old")), 404);
    assert_eq!(get(&server, &format!("/v2/{repo}/manifests/{old}")), 404);
    assert_eq!(get(&server, &format!("/v2/{repo}/manifests/new")), 200);
    assert!(
        server.log_shows("retention finished"),
        "{}",
        server.log_tail()
    );
}
