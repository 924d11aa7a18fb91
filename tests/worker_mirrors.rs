//! Worker mirrors (`[[mirrors]]` in worker.toml): with the origin registry stopped, the worker
//! pulls through its mirrors in order, past one that is down and one that serves wrong bytes
//! for every blob (the fault proxy), from a site registry filled by `rdctl sync`; the zone's
//! root holds the image's bytes. With `resolve_tags = false` a tag needs the origin, while a
//! digest reference still comes from the mirrors. With an admission policy, the signatures
//! are read from the mirror too: a signed image is admitted with the origin stopped.

use std::net::TcpListener;

use crate::fault_proxy::{Fault, FaultProxy, Rule};
use crate::registry_e2e::http;
use crate::signing::{key_id, rd};
use crate::util::{Server, ok, rdctl, tail, tempdir};
use crate::worker_e2e::{Node, RawImage};
use crate::worker_policy::{illumos_image, policy_node};

fn mirrors_toml(origin: &str, endpoints: &[String], resolve_tags: bool) -> String {
    let list: Vec<String> = endpoints.iter().map(|e| format!("\"{e}\"")).collect();
    format!(
        "\n[[mirrors]]\nregistry = \"{origin}\"\nendpoints = [{}]\nresolve_tags = {resolve_tags}\n",
        list.join(", ")
    )
}

#[test]
fn worker_pulls_through_mirrors_past_a_down_one_and_a_lying_one_while_the_origin_is_down() {
    let dir = tempdir();
    let (d_origin, d_site) = (tempdir(), tempdir());
    let origin = Server::start(d_origin.path(), &[]);
    let site = Server::start(d_site.path(), &[]);
    let img = RawImage::new("mirrored");
    img.push(origin.addr, "apps/web", "1");
    let origin_host = origin.host();
    let (st, headers, _) = http(
        origin.addr,
        "HEAD",
        "/v2/apps/web/manifests/1",
        &[("Accept", "application/vnd.oci.image.manifest.v1+json")],
        b"",
    );
    assert_eq!(st, 200);
    let digest = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("docker-content-digest"))
        .unwrap()
        .1
        .clone();
    // The site holds the origin's repositories under central/.
    ok(rdctl().args(["sync", &origin_host, &format!("{}/central", site.host())]));
    let liar = FaultProxy::start(
        site.addr,
        vec![Rule {
            method: "GET",
            path: "/blobs/".into(),
            times: u32::MAX,
            fault: Fault::Corrupt,
        }],
    );
    let down = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    drop(origin);

    let node = Node::new(&dir.path().join("node"));
    let mut config = std::fs::read_to_string(node.config()).unwrap();
    let endpoints = [
        format!("{down}/central"),
        format!("{}/central", liar.host()),
        format!("{}/central", site.host()),
    ];
    config.push_str(&mirrors_toml(&origin_host, &endpoints, true));
    std::fs::write(node.config(), &config).unwrap();
    node.zone("web", &format!("{origin_host}/apps/web:1"));
    let out = node.run_once();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "worker failed:\n{}",
        tail(&out.stderr)
    );
    let st = node.status();
    assert_eq!(st["web"]["phase"], "Ready", "{:#}", st["web"]);
    assert_eq!(st["web"]["current_digest"], digest.as_str());
    assert_eq!(
        std::fs::read(node.root("web").join("etc-name")).unwrap(),
        b"mirrored"
    );
    // The liar was asked for one blob, its bytes refused, and it was not asked again.
    let lied: Vec<_> = liar
        .seen_for("/blobs/")
        .into_iter()
        .filter(|s| s.method == "GET")
        .collect();
    assert_eq!(lied.len(), 1, "{lied:#?}");
    assert_eq!(lied[0].fault, Some(Fault::Corrupt));
    assert!(
        log.contains("mirror failed") && log.contains(&liar.host()),
        "no mirror failure logged:\n{log}"
    );

    // Tags only at the origin (down): the tag fails, a digest reference is served by mirrors.
    let mut config = std::fs::read_to_string(node.config()).unwrap();
    config = config.replace("resolve_tags = true", "resolve_tags = false");
    std::fs::write(node.config(), &config).unwrap();
    std::fs::remove_file(dir.path().join("node/zones/web.toml")).unwrap();
    node.zone("tagged", &format!("{origin_host}/apps/web:1"));
    node.zone("pinned", &format!("{origin_host}/apps/web@{digest}"));
    let out = node.run_once();
    let st = node.status();
    assert_eq!(st["pinned"]["phase"], "Ready", "{:#}", st["pinned"]);
    assert_eq!(
        st["tagged"]["phase"],
        "Failed",
        "{:#}\n{}",
        st["tagged"],
        tail(&out.stderr)
    );
    assert!(
        st["tagged"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains(&origin_host)),
        "the failure names the origin: {:#}",
        st["tagged"]
    );
    drop((site, liar));
}

#[test]
fn with_a_policy_signatures_are_read_from_the_mirror_while_the_origin_is_down() {
    let dir = tempdir();
    let d = dir.path();
    for k in ["ours", "stranger"] {
        ok(rd(d).args(["key", "generate", "--output-key-prefix", k]));
    }
    let (d_origin, d_site) = (tempdir(), tempdir());
    let origin = Server::start(d_origin.path(), &[]);
    let site = Server::start(d_site.path(), &[]);
    let origin_host = origin.host();
    let signed = format!("{origin_host}/apps/signed:1");
    let digest = illumos_image(d, "signed", &signed);
    ok(rd(d).args(["sign", "--key", "ours.key", &signed]));
    let unsigned = format!("{origin_host}/apps/unsigned:1");
    illumos_image(d, "unsigned", &unsigned);
    // The site holds the origin's repositories, signatures included, under central/.
    ok(rdctl().args(["sync", &origin_host, &format!("{}/central", site.host())]));
    drop(origin);

    std::fs::write(
        d.join("policy.toml"),
        "default = \"reject\"\n[[rule]]\nmatch = \"**/apps/*\"\naction = \"signed\"\nkeys = [\"ours.pub\"]\n",
    )
    .unwrap();
    let node = policy_node(
        &d.join("node"),
        "../policy.toml",
        &mirrors_toml(&origin_host, &[format!("{}/central", site.host())], true),
    );
    node.zone("web", &signed);
    node.zone("other", &unsigned);
    let out = node.run_once();
    let st = node.status();
    let z = &st["web"];
    assert_eq!(z["phase"], "Ready", "{z:#}\n{}", tail(&out.stderr));
    assert_eq!(z["current_digest"], digest.as_str());
    let ours = key_id(d, "ours.pub");
    assert_eq!(
        z["admission"]["keys"],
        serde_json::json!([&ours[..ours.len().min("sha256:".len() + 12)]]),
        "{z:#}"
    );
    // The mirror cannot admit what the keys did not sign: the unsigned image is refused as
    // unsigned (the mirror answered), not for want of the origin.
    let z = &st["other"];
    assert_eq!(z["phase"], "Denied", "{z:#}");
    assert_eq!(z["denial"]["reason"], "unsigned", "{z:#}");
    assert!(!node.zonepath("other").exists());
    // The table ends with the node's conditions (nothing was short of resources).
    let table = ok(rdctl().args([
        "worker",
        "status",
        "--config",
        &node.config().to_string_lossy(),
    ]));
    let table = String::from_utf8_lossy(&table.stdout);
    let last = table.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("conditions: DiskPressure=") && last.ends_with(" ResourcePressure=False"),
        "{table}"
    );
    drop(site);
}
