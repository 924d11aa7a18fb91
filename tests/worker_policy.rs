//! The worker's admission policy end to end: images pushed to `rdctl registry serve`, signed
//! with `rdctl sign` / `rdctl build --sign-key --attest`, a policy file named by worker.toml,
//! and `rdctl worker run` / `rdctl worker status`. Every refusal names its rule and its own
//! reason and creates nothing; an admitted zone records the rule, keys and attestations; a tag
//! moved to an unsigned image leaves the running zone alone; SIGHUP reloads the policy and a
//! broken file keeps the one in force.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::registry_e2e::http;
use crate::signing::{key_id, pushed_image, rd, verify};
use crate::util::{Server, ok, rdctl, s, tail, tempdir};
use crate::worker_e2e::{Node, stored_blob, umoci_image};

/// An illumos image (worker_e2e's umoci image, which a `dir` zone can run) made in
/// `dir/<name>` and pushed to `reference`; returns its manifest digest.
pub(crate) fn illumos_image(dir: &Path, name: &str, reference: &str) -> String {
    let work = dir.join(name);
    fs::create_dir_all(&work).unwrap();
    let layout = umoci_image(&work);
    let out = ok(rdctl().args(["push", "--json", &format!("{}:l2", s(&layout)), reference]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["root"]["digest"].as_str().unwrap().to_owned()
}

/// A node whose worker.toml names `policy` (relative to the node directory).
pub(crate) fn policy_node(dir: &Path, policy: &str, extra: &str) -> Node {
    let node = Node::new(dir);
    fs::write(
        node.config(),
        format!(
            "zones_dir = \"zones\"\nstate_dir = \"state\"\nworker_id = \"e2e\"\n\
             os_version = \"e2e-build\"\nbackoff_initial_secs = 60\npolicy = \"{policy}\"\n{extra}\
             [provisioner]\nkind = \"dir\"\nbase = \"roots\"\n"
        ),
    )
    .unwrap();
    node
}

/// Three key pairs made by rdctl: `ours`, `second` and `stranger`.
fn keys(d: &Path) {
    for k in ["ours", "second", "stranger"] {
        ok(rd(d).args(["key", "generate", "--output-key-prefix", k]));
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min("sha256:".len() + 12)]
}

/// `rdctl worker status` as text (the table), with extra flags.
fn status_text(node: &Node, flags: &[&str]) -> String {
    let out = ok(rdctl()
        .args(["worker", "status", "--config", s(&node.config())])
        .args(flags));
    String::from_utf8(out.stdout).unwrap()
}

/// The table line of `zone`.
fn line<'a>(table: &'a str, zone: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(zone))
        .unwrap_or_else(|| panic!("no line for {zone}:\n{table}"))
}

#[test]
fn every_refusal_names_its_rule_and_reason_and_creates_nothing() {
    let dir = tempdir();
    let d = dir.path();
    keys(d);
    let data = tempdir();
    let reg = Server::start(data.path(), &[]);
    let p = format!("{}/p", reg.host());

    // One image per case (the motd lengths differ: pushed_image works in img-<len>).
    let unsigned = pushed_image(d, "u\n", &format!("{p}/sig-unsigned:v1"));
    let other = pushed_image(d, "ok\n", &format!("{p}/sig-otherkey:v1"));
    ok(rd(d).args([
        "sign",
        "--key",
        "stranger.key",
        &format!("{p}/sig-otherkey:v1"),
    ]));
    // A's signature manifest copied onto B's .sig tag: valid, but over another digest.
    let a = pushed_image(d, "aaa\n", &format!("{p}/sig-replay:a"));
    let b = pushed_image(d, "bbbb\n", &format!("{p}/sig-replay:b"));
    ok(rd(d).args(["sign", "--key", "ours.key", &format!("{p}/sig-replay:a")]));
    let sig_tag = |digest: &str| format!("{}.sig", digest.replace(':', "-"));
    ok(rdctl().args([
        "tag",
        &format!("{p}/sig-replay:{}", sig_tag(&a)),
        &sig_tag(&b),
    ]));
    // Signed by the right key, then the payload blob corrupted in the registry's store.
    let tampered = pushed_image(d, "ccccc\n", &format!("{p}/sig-tampered:v1"));
    ok(rd(d).args(["sign", "--key", "ours.key", &format!("{p}/sig-tampered:v1")]));
    let (_, doc, _) = verify(d, &["--key", "ours.pub", &format!("{p}/sig-tampered:v1")]);
    let payload = doc["signatures"][0]["layer"].as_str().unwrap().to_owned();
    let blob = stored_blob(data.path(), &payload);
    let mut bytes = fs::read(&blob).unwrap();
    let at = bytes.len() - 10;
    bytes[at] ^= 1;
    let mut perms = fs::metadata(&blob).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    fs::set_permissions(&blob, perms).unwrap();
    fs::write(&blob, bytes).unwrap();
    // Signed, but without the attestation the rule requires.
    pushed_image(d, "dddddd\n", &format!("{p}/att:v1"));
    ok(rd(d).args(["sign", "--key", "ours.key", &format!("{p}/att:v1")]));
    // One signature where the rule wants 2 of 2.
    pushed_image(d, "eeeeeee\n", &format!("{p}/two:v1"));
    ok(rd(d).args(["sign", "--key", "ours.key", &format!("{p}/two:v1")]));
    // A digest pin required: by tag refused, by digest admitted.
    let pin = illumos_image(d, "pin", &format!("{p}/pin:v1"));
    pushed_image(d, "ggggggggg\n", &format!("{p}/no:v1"));
    pushed_image(
        d,
        "hhhhhhhhhh\n",
        &format!("{}/elsewhere/app:v1", reg.host()),
    );

    fs::write(
        d.join("policy.toml"),
        r#"# no default: an image no rule matches is refused
[[rule]]
match = "**/p/sig-*"
action = "signed"
keys = ["ours.pub"]

[[rule]]
match = "**/p/att"
action = "signed"
keys = ["ours.pub"]
require_attestations = ["spdxjson"]

[[rule]]
match = "**/p/two"
action = "signed"
keys = ["ours.pub", "second.pub"]
threshold = 2

[[rule]]
match = "**/p/pin"
action = "accept"
require_digest_pin = true

[[rule]]
match = "**/p/no"
action = "reject"
"#,
    )
    .unwrap();
    let node = policy_node(&d.join("node"), "../policy.toml", "");
    let zones = [
        ("unsigned", format!("{p}/sig-unsigned:v1")),
        ("otherkey", format!("{p}/sig-otherkey:v1")),
        ("replay", format!("{p}/sig-replay:b")),
        ("tampered", format!("{p}/sig-tampered:v1")),
        ("noatt", format!("{p}/att:v1")),
        ("threshold", format!("{p}/two:v1")),
        ("bytag", format!("{p}/pin:v1")),
        ("pinned", format!("{p}/pin@{pin}")),
        ("rejected", format!("{p}/no:v1")),
        ("nomatch", format!("{}/elsewhere/app:v1", reg.host())),
    ];
    for (zone, image) in &zones {
        node.zone(zone, image);
    }
    let out = node.run_once();
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout: {}\nstderr:\n{}",
        tail(&out.stdout),
        tail(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().next().unwrap(),
        "provisioned: pinned; unchanged: ; failed: bytag,noatt,nomatch,otherkey,rejected,replay,tampered,threshold,unsigned; backing off: ; removed: ",
        "{}",
        tail(&out.stderr)
    );

    let st = node.status();
    let rule = |n: usize, m: &str| format!("rule {n} (match = \"{m}\")");
    for (zone, class, rule_text, words) in [
        (
            "unsigned",
            "unsigned",
            Some(rule(1, "**/p/sig-*")),
            "unsigned: no signature found".to_owned(),
        ),
        (
            "otherkey",
            "unknown_key",
            Some(rule(1, "**/p/sig-*")),
            "signed by another key, or the payload was changed after signing".to_owned(),
        ),
        (
            "replay",
            "replayed",
            Some(rule(1, "**/p/sig-*")),
            format!("signature over another digest {a}"),
        ),
        (
            "tampered",
            "tampered",
            Some(rule(1, "**/p/sig-*")),
            "tampered payload".to_owned(),
        ),
        (
            "noatt",
            "missing_attestation",
            Some(rule(2, "**/p/att")),
            "missing attestation spdxjson (https://spdx.dev/Document)".to_owned(),
        ),
        (
            "threshold",
            "threshold",
            Some(rule(3, "**/p/two")),
            format!(
                "signed by 1 of 2 keys, 2 needed (signed by {})",
                short(&key_id(d, "ours.pub"))
            ),
        ),
        (
            "bytag",
            "not_pinned",
            Some(rule(4, "**/p/pin")),
            "not pinned by digest".to_owned(),
        ),
        (
            "rejected",
            "rejected_by_rule",
            Some(rule(5, "**/p/no")),
            "rejected by rule".to_owned(),
        ),
        (
            "nomatch",
            "no_rule_matches",
            None,
            "no rule matches".to_owned(),
        ),
    ] {
        let z = &st[zone];
        assert_eq!(z["phase"], "Denied", "{zone}: {z:#}");
        assert_eq!(z["denial"]["reason"], class, "{zone}: {z:#}");
        assert_eq!(
            z["denial"]["rule"].as_str(),
            rule_text.as_deref(),
            "{zone}: {z:#}"
        );
        let message = z["denial"]["message"].as_str().unwrap();
        assert!(message.contains(&words), "{zone}: {message}");
        let error = z["last_error"].as_str().unwrap();
        assert!(
            error.starts_with("policy refused ") && error.contains(&words),
            "{zone}: {error}"
        );
        assert!(z["current_digest"].is_null(), "{zone}: {z:#}");
        assert!(z["admission"].is_null(), "{zone}: {z:#}");
        // Nothing created, and no layer fetched: the check came first.
        assert!(!node.zonepath(zone).exists(), "{zone}: a zone was created");
    }
    // The replayed and unsigned images' layers were never fetched into the content store.
    for digest in [&unsigned, &other, &b, &tampered] {
        let hex = digest.trim_start_matches("sha256:");
        assert!(
            !d.join("node/state/content/blobs/sha256").join(hex).exists(),
            "{digest} was fetched"
        );
    }
    let pinned_blob = d
        .join("node/state/content/blobs/sha256")
        .join(pin.trim_start_matches("sha256:"));
    assert!(pinned_blob.is_file(), "the admitted image was pulled");
    // The one admitted zone records its rule (no keys: an accept rule).
    let z = &st["pinned"];
    assert_eq!(z["phase"], "Ready", "{z:#}");
    assert_eq!(z["admission"]["rule"], rule(4, "**/p/pin").as_str());
    assert_eq!(z["admission"]["keys"], serde_json::json!([]));
    assert!(node.root("pinned").is_dir());

    // The table shows the phase and the reason first.
    let table = status_text(&node, &[]);
    assert!(
        table.lines().next().unwrap().contains("ADMITTED BY"),
        "{table}"
    );
    let l = line(&table, "otherkey");
    assert!(
        l.contains("Denied") && l.contains("[rule 1] signature on sha256:"),
        "{table}"
    );
    assert!(line(&table, "pinned").contains("rule-4"), "{table}");
    let wide = status_text(&node, &["--wide"]);
    assert!(
        line(&wide, "replay").contains(&format!("[{}]", rule(1, "**/p/sig-*"))),
        "{wide}"
    );
}

#[test]
fn a_signed_build_is_admitted_and_a_tag_moved_to_an_unsigned_image_is_refused() {
    use crate::builder_e2e::{TOOL_BIN, image_file, publish_fixture};
    use crate::ips_cli::Depot;
    let dir = tempdir();
    let d = dir.path();
    keys(d);
    let repo_dir = publish_fixture(d, TOOL_BIN);
    let depot = Depot::start(&repo_dir, d);
    let work = d.join("work");
    fs::create_dir_all(&work).unwrap();
    let image = work.join("image.toml");
    fs::write(&image, image_file(&depot.url)).unwrap();
    ok(rdctl().args(["lock", s(&image)]));
    let data = tempdir();
    let reg = Server::start(data.path(), &[]);
    let repo = format!("{}/built/app", reg.host());
    let built = ok(rd(d).env("SOURCE_DATE_EPOCH", "1700000000").args([
        "build",
        s(&image),
        "--output",
        s(&work.join("out")),
        "--push",
        &format!("{repo}:1.0"),
        "--sign-key",
        "ours.key",
        "--attest",
        "--json",
        "--quiet",
    ]));
    let summary: Value = serde_json::from_slice(&built.stdout).unwrap();
    let digest = summary["manifest"].as_str().unwrap().to_owned();

    fs::write(
        d.join("policy.toml"),
        "default = \"reject\"\n\
         [[rule]]\nmatch = \"**/built/*\"\naction = \"signed\"\nkeys = [\"stranger.pub\", \"ours.pub\"]\n\
         require_attestations = [\"spdxjson\", \"slsaprovenance1\"]\n\
         deny_packages = [\"demo/tool@<2.1\", \"pkg:/system/core@<1.0\"]\n\
         slsa_builder_id = \"https://reddwarf.invalid/rdctl\"\n",
    )
    .unwrap();
    let node = policy_node(&d.join("node"), "../policy.toml", "");
    node.zone("app", &format!("{repo}:1.0"));
    let out = node.run_once();
    assert!(
        out.status.success(),
        "stdout: {}\nstderr:\n{}",
        tail(&out.stdout),
        tail(&out.stderr)
    );
    let st = node.status();
    let z = &st["app"];
    assert_eq!(z["phase"], "Ready", "{z:#}");
    assert_eq!(z["current_digest"], digest.as_str());
    let ours = key_id(d, "ours.pub");
    assert_eq!(
        z["admission"],
        serde_json::json!({
            "rule": "rule 1 (match = \"**/built/*\")",
            "keys": [short(&ours)],
            "attestations": ["https://spdx.dev/Document", "https://slsa.dev/provenance/v1"],
        }),
        "{z:#}"
    );
    assert!(node.root("app").join("usr").is_dir());
    let table = status_text(&node, &[]);
    assert!(line(&table, "app").contains("rule-1,1key,2att"), "{table}");
    let wide = status_text(&node, &["--wide"]);
    assert!(
        line(&wide, "app").contains(&format!("keys={}", short(&ours))),
        "{wide}"
    );

    // The tag moves to an unsigned image: refused, the zone keeps running the admitted one.
    let description = fs::read(node.zonepath("app").join("zone.json")).unwrap();
    let moved = illumos_image(d, "moved", &format!("{repo}:1.0"));
    assert_ne!(moved, digest);
    let out = node.run_once();
    assert_eq!(out.status.code(), Some(1), "{}", tail(&out.stderr));
    let st = node.status();
    let z = &st["app"];
    assert_eq!(z["phase"], "Denied", "{z:#}");
    assert_eq!(
        z["current_digest"],
        digest.as_str(),
        "still the admitted image"
    );
    assert_eq!(z["desired_digest"], moved.as_str());
    assert_eq!(z["denial"]["reason"], "unsigned", "{z:#}");
    assert_eq!(z["denial"]["digest"], moved.as_str());
    let message = z["denial"]["message"].as_str().unwrap();
    assert!(
        message.ends_with(&format!(
            "; the zone keeps running its current image {digest}"
        )),
        "{message}"
    );
    assert_eq!(
        z["admission"]["keys"],
        serde_json::json!([short(&ours)]),
        "the running image's admission stays recorded"
    );
    assert_eq!(
        fs::read(node.zonepath("app").join("zone.json")).unwrap(),
        description,
        "the zone was not replaced"
    );
    assert!(node.root("app").join("usr").is_dir());
    let table = status_text(&node, &[]);
    let l = line(&table, "app");
    assert!(
        l.contains("Denied") && l.contains("unsigned: no signature found"),
        "{table}"
    );

    // The build's own SBOM read by a stricter rule: demo/tool 2.1 is now refused, by name.
    fs::write(
        d.join("policy.toml"),
        "[[rule]]\nmatch = \"**/built/*\"\naction = \"signed\"\nkeys = [\"ours.pub\"]\n\
         deny_packages = [\"pkg:/demo/tool@<=2.1\"]\n",
    )
    .unwrap();
    node.zone("strict", &format!("{repo}@{digest}"));
    let out = node.run_once();
    assert_eq!(out.status.code(), Some(1), "{}", tail(&out.stderr));
    let st = node.status();
    let z = &st["strict"];
    assert_eq!(z["phase"], "Denied", "{z:#}");
    assert_eq!(z["denial"]["reason"], "denied_package", "{z:#}");
    let message = z["denial"]["message"].as_str().unwrap();
    assert!(
        message.contains("the SBOM lists demo/tool@2.1,5.11-2024.0:20240102T030405Z (pkg://")
            && message.contains("refused by deny_packages \"pkg:/demo/tool@<=2.1\""),
        "{message}"
    );
    assert!(!node.zonepath("strict").exists(), "a zone was created");
}

/// A `rdctl worker run` child, killed and reaped when dropped.
struct Running {
    child: Child,
    log: PathBuf,
}

impl Running {
    fn signal(&self, sig: &str) {
        ok(Command::new("kill").args([sig, &self.child.id().to_string()]));
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits up to 60 s for `cond`, failing with `what` and the worker's log.
fn wait_for(w: &Running, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}; worker log:\n{}",
            w.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn sighup_reloads_the_policy_and_a_broken_file_keeps_the_old_one() {
    let dir = tempdir();
    let d = dir.path();
    let data = tempdir();
    let reg = Server::start(data.path(), &[]);
    let image = format!("{}/hup/app:v1", reg.host());
    illumos_image(d, "img", &image);
    let policy = d.join("policy.toml");
    let reject = "[[rule]]\nmatch = \"**/hup/*\"\naction = \"reject\"\n";
    fs::write(&policy, reject).unwrap();
    let node = policy_node(
        &d.join("node"),
        "../policy.toml",
        "poll_interval_secs = 1\nmetrics_listen = \"127.0.0.1:0\"\n",
    );
    node.zone("app", &image);

    // Errors name the file as worker.toml names it, made absolute.
    let named = d.join("node").join("../policy.toml");
    // A broken policy at start is a startup error naming the file, the line and the field.
    fs::write(
        &policy,
        "[[rule]]\nmatch = \"**/hup/*\"\naction = \"signed\"\nkeys = []\n",
    )
    .unwrap();
    let out = node.run_once();
    assert_eq!(out.status.code(), Some(2), "{}", tail(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "policy: {}:4: rule.0.keys: action = \"signed\" needs at least one key",
            s(&named)
        )),
        "{stderr}"
    );
    assert!(
        !d.join("node/state").exists(),
        "a startup error leaves no state"
    );
    fs::write(&policy, reject).unwrap();

    let log = d.join("worker.log");
    let child = rdctl()
        .args(["worker", "run", "--config", s(&node.config())])
        .env("RDCTL_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let w = Running { child, log };
    let phase = || node.status().get("app").map(|z| z["phase"].clone());
    wait_for(&w, "the first pass to refuse the image", || {
        phase() == Some("Denied".into())
    });
    assert_eq!(node.status()["app"]["denial"]["reason"], "rejected_by_rule");
    let addr: std::net::SocketAddr = w
        .log()
        .lines()
        .find_map(|l| l.split("metrics listening on ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .expect("the worker logs its metrics address")
        .parse()
        .unwrap();
    let metrics = || {
        let (st, _, body) = http(addr, "GET", "/metrics", &[], b"");
        assert_eq!(st, 200);
        String::from_utf8(body).unwrap()
    };
    let has = |text: &str, line: &str| text.lines().any(|l| l == line);
    let m = metrics();
    assert!(
        has(
            &m,
            "rdctl_worker_admission_denials_total{reason=\"rejected_by_rule\"} 1"
        ) && has(&m, "rdctl_worker_admissions_total 0")
            && has(&m, "rdctl_worker_policy_reload_failed 0"),
        "{m}"
    );

    // A broken file: the log says why, the reject policy stays in force.
    fs::write(
        &policy,
        "[[rule]]\nmatch = \"**/hup/*\"\naction = \"sometimes\"\n",
    )
    .unwrap();
    w.signal("-HUP");
    wait_for(&w, "the failed reload in the log", || {
        w.log().contains("policy reload failed")
    });
    let logged = w.log();
    let failed = logged
        .lines()
        .find(|l| l.contains("policy reload failed"))
        .unwrap();
    assert!(
        failed.contains(&format!("{}:3: rule.0.action", s(&named)))
            && failed.contains("previous policy stays in force"),
        "{logged}"
    );
    // The pass after the reload still refuses (backoff ignored: the record is rewritten).
    let before = node.status()["app"]["updated_unix"].as_u64().unwrap();
    wait_for(&w, "a pass under the old policy", || {
        let z = &node.status()["app"];
        z["failures"].as_u64().unwrap() >= 2 || z["updated_unix"].as_u64().unwrap() > before
    });
    assert_eq!(node.status()["app"]["phase"], "Denied");
    assert!(!node.zonepath("app").exists());
    let m = metrics();
    assert!(
        has(&m, "rdctl_worker_policy_reload_failed 1")
            && has(&m, "rdctl_worker_policy_reloads_total{result=\"error\"} 1"),
        "{m}"
    );

    // Now accept: the next pass admits.
    fs::write(
        &policy,
        "[[rule]]\nmatch = \"**/hup/*\"\naction = \"accept\"\n",
    )
    .unwrap();
    w.signal("-HUP");
    wait_for(&w, "the zone to be admitted", || {
        phase() == Some("Ready".into())
    });
    let z = &node.status()["app"];
    assert_eq!(
        z["admission"]["rule"], "rule 1 (match = \"**/hup/*\")",
        "{z:#}"
    );
    assert!(z.get("denial").is_none(), "{z:#}");
    assert!(node.root("app").is_dir());
    assert!(w.log().contains("policy reloaded"), "{}", w.log());
    let m = metrics();
    assert!(
        has(&m, "rdctl_worker_policy_reload_failed 0")
            && has(&m, "rdctl_worker_policy_reloads_total{result=\"ok\"} 1")
            && has(&m, "rdctl_worker_admissions_total 2"),
        "{m}"
    );
    w.signal("-TERM");
}

#[test]
fn a_signature_removed_while_the_layers_download_refuses_the_image() {
    use crate::fault_proxy::{Fault, FaultProxy, Rule};
    use crate::worker_e2e::RawImage;
    let dir = tempdir();
    let d = dir.path();
    ok(rd(d).args(["key", "generate", "--output-key-prefix", "ours"]));
    let data = tempdir();
    let reg = Server::start(data.path(), &[]);
    let img = RawImage::new("signature removed");
    img.push(reg.addr, "gone/app", "1");
    let direct = format!("{}/gone/app:1", reg.host());
    // Only the .sig tag (no referrer), so removing the tag removes the signature.
    ok(rd(d).args(["sign", "--key", "ours.key", "--no-referrer", &direct]));
    let (code, doc, stderr) = verify(d, &["--key", "ours.pub", &direct]);
    assert_eq!(code, 0, "{stderr}");
    let digest = doc["digest"].as_str().unwrap().to_owned();
    // The worker reaches the registry through a proxy that holds the first layer's body.
    let proxy = FaultProxy::start(
        reg.addr,
        vec![Rule {
            method: "GET",
            path: img.layer_digest(0),
            times: 1,
            fault: Fault::Hold(0),
        }],
    );
    fs::write(
        d.join("policy.toml"),
        "[[rule]]\nmatch = \"**/gone/*\"\naction = \"signed\"\nkeys = [\"ours.pub\"]\n",
    )
    .unwrap();
    let node = policy_node(&d.join("node"), "../policy.toml", "");
    node.zone("app", &format!("{}/gone/app:1", proxy.host()));
    let log = d.join("worker.log");
    let child = rdctl()
        .args(["worker", "run", "--once", "--config", s(&node.config())])
        .env("RDCTL_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut w = Running { child, log };
    // Admitted before the pull; the layer download is held: the signature goes meanwhile.
    proxy.wait_for(Duration::from_secs(60), "the held layer GET", |seen| {
        seen.iter().any(|s| s.fault == Some(Fault::Hold(0)))
    });
    assert!(w.log().contains("admitted=true"), "{}", w.log());
    let sig_tag = format!("{}.sig", digest.replace(':', "-"));
    ok(rdctl().args(["rm", &format!("{}/gone/app:{sig_tag}", reg.host())]));
    proxy.release();
    let status = w.child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{}", w.log());
    let z = &node.status()["app"];
    assert_eq!(z["phase"], "Denied", "{z:#}");
    assert_eq!(z["denial"]["reason"], "unsigned", "{z:#}");
    assert!(z["current_digest"].is_null(), "{z:#}");
    assert!(
        !node.zonepath("app").exists(),
        "no zone after the second check refused"
    );
    // The verified root built meanwhile was removed with the refusal.
    let staging: Vec<_> = fs::read_dir(d.join("node/roots/.staging"))
        .map(|r| r.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(staging.is_empty(), "left in staging: {staging:?}");
}

/// The worker admits what operators sign with cosign itself: a key pair from
/// `cosign generate-key-pair`, `cosign sign` at our registry, a policy naming cosign.pub.
/// The same image unsigned, in the same pass, is refused.
#[test]
fn an_image_signed_by_cosign_is_admitted() {
    let dir = tempdir();
    let d = dir.path();
    ok(crate::signing::cosign(d).args(["generate-key-pair"]));
    let data = tempdir();
    let reg = Server::start(data.path(), &[]);
    let signed = format!("{}/prod/signed:1", reg.host());
    let unsigned = format!("{}/prod/unsigned:1", reg.host());
    let digest = illumos_image(d, "signed", &signed);
    illumos_image(d, "unsigned", &unsigned);
    crate::signing::cosign_sign(d, "cosign.key", &format!("{signed}@{digest}"));
    fs::write(
        d.join("policy.toml"),
        "[[rule]]\nmatch = \"**/prod/*\"\naction = \"signed\"\nkeys = [\"cosign.pub\"]\n",
    )
    .unwrap();
    let node = policy_node(&d.join("node"), "../policy.toml", "");
    node.zone("signed", &signed);
    node.zone("unsigned", &unsigned);
    let out = node.run_once();
    assert!(!out.status.success(), "the unsigned zone fails the pass");
    let st = node.status();
    assert_eq!(st["signed"]["phase"], "Ready", "{:#}", st["signed"]);
    assert_eq!(st["signed"]["current_digest"], digest.as_str());
    let admitted = st["signed"]["admission"].to_string();
    let pub_id = key_id(d, "cosign.pub");
    assert!(admitted.contains(short(&pub_id)), "{admitted}");
    assert!(node.root("signed").is_dir(), "the signed zone exists");
    assert_eq!(st["unsigned"]["phase"], "Denied", "{:#}", st["unsigned"]);
    assert!(!node.root("unsigned").exists());
}

/// An SPDX SBOM as `rdctl build` writes one, listing `openssl` at `version`.
fn openssl_sbom(version: &str) -> String {
    serde_json::json!({
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": "zones/app",
        "documentNamespace": "https://reddwarf.invalid/spdx/zones/app",
        "creationInfo": {"created": "2024-01-01T00:00:00Z", "creators": ["Tool: rdctl"]},
        "packages": [
            {
                "SPDXID": "SPDXRef-Package-0",
                "name": "shell/bash",
                "versionInfo": "5.2,5.11-2024.0.0.0",
                "supplier": "Organization: openindiana.org",
                "downloadLocation": "NOASSERTION",
                "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "ips-fmri",
                    "referenceLocator": "pkg://openindiana.org/shell/bash@5.2,5.11-2024.0.0.0"}],
            },
            {
                "SPDXID": "SPDXRef-Package-1",
                "name": "library/security/openssl",
                "versionInfo": version,
                "supplier": "Organization: openindiana.org",
                "downloadLocation": "NOASSERTION",
                "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "ips-fmri",
                    "referenceLocator": format!("pkg://openindiana.org/library/security/openssl@{version}")}],
            },
        ],
    })
    .to_string()
}

/// `deny_packages = ["openssl@<3.0"]`: an image whose SBOM attestation (by `rdctl attest`)
/// lists openssl 1.1.1 is refused naming the package and the entry, one without an SBOM is
/// refused for that, and neither is created; the same SBOM with openssl 3.1 (as a sigstore
/// bundle this time) is admitted and runs.
#[test]
fn deny_packages_refuses_an_image_whose_sbom_lists_an_old_openssl() {
    let dir = tempdir();
    let d = dir.path();
    keys(d);
    let data = tempdir();
    let reg = Server::start(data.path(), &[]);
    let old = format!("{}/prod/old-ssl:1", reg.host());
    let new = format!("{}/prod/new-ssl:1", reg.host());
    let bare = format!("{}/prod/no-sbom:1", reg.host());
    // The refused images are never run: small ones of their own content (so no blob of
    // theirs is shared with the admitted image).
    let old_digest = pushed_image(d, "old openssl\n", &old);
    pushed_image(d, "no sbom\n", &bare);
    let new_digest = illumos_image(d, "new", &new);
    fs::write(
        d.join("old.spdx.json"),
        openssl_sbom("1.1.1.20,5.11-2024.0.0.0"),
    )
    .unwrap();
    fs::write(
        d.join("new.spdx.json"),
        openssl_sbom("3.1.4,5.11-2024.0.0.0"),
    )
    .unwrap();
    for (image, sbom, format) in [
        (&old, "old.spdx.json", "legacy"),
        (&new, "new.spdx.json", "bundle"),
    ] {
        ok(rd(d).args(["sign", "--key", "ours.key", image]));
        ok(rd(d).args([
            "attest",
            "--key",
            "ours.key",
            "--type",
            "spdxjson",
            "--predicate",
            sbom,
            "--format",
            format,
            image,
        ]));
    }
    ok(rd(d).args(["sign", "--key", "ours.key", &bare]));
    fs::write(
        d.join("policy.toml"),
        "[[rule]]\nmatch = \"**/prod/*\"\naction = \"signed\"\nkeys = [\"ours.pub\"]\n\
         deny_packages = [\"openssl@<3.0\"]\n",
    )
    .unwrap();
    let node = policy_node(&d.join("node"), "../policy.toml", "");
    node.zone("old", &old);
    node.zone("new", &new);
    node.zone("bare", &bare);
    let out = node.run_once();
    assert_eq!(out.status.code(), Some(1), "{}", tail(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().next().unwrap(),
        "provisioned: new; unchanged: ; failed: bare,old; backing off: ; removed: ",
        "{}",
        tail(&out.stderr)
    );
    let st = node.status();
    for (zone, class, words) in [
        (
            "old",
            "denied_package",
            "the SBOM lists library/security/openssl@1.1.1.20,5.11-2024.0.0.0 \
             (pkg://openindiana.org/library/security/openssl@1.1.1.20,5.11-2024.0.0.0), \
             refused by deny_packages \"openssl@<3.0\""
                .to_owned(),
        ),
        (
            "bare",
            "missing_sbom",
            "no verified SPDX SBOM attestation (https://spdx.dev/Document) by the rule's keys, \
             which deny_packages \"openssl@<3.0\" needs"
                .to_owned(),
        ),
    ] {
        let z = &st[zone];
        assert_eq!(z["phase"], "Denied", "{zone}: {z:#}");
        assert_eq!(z["denial"]["reason"], class, "{zone}: {z:#}");
        assert_eq!(
            z["denial"]["rule"], "rule 1 (match = \"**/prod/*\")",
            "{zone}: {z:#}"
        );
        let message = z["denial"]["message"].as_str().unwrap();
        assert!(message.contains(&words), "{zone}: {message}");
        assert!(
            z["last_error"].as_str().unwrap().contains(&words),
            "{zone}: {z:#}"
        );
        assert!(z["current_digest"].is_null(), "{zone}: {z:#}");
        assert!(!node.zonepath(zone).exists(), "{zone}: a zone was created");
    }
    assert!(
        !d.join("node/state/content/blobs/sha256")
            .join(old_digest.trim_start_matches("sha256:"))
            .exists(),
        "the refused image was fetched"
    );
    let z = &st["new"];
    assert_eq!(z["phase"], "Ready", "{z:#}");
    assert_eq!(z["current_digest"], new_digest.as_str());
    assert!(node.root("new").join("usr").is_dir());
}
