//! Layers of one pull are downloaded concurrently (`max_concurrent_downloads`): a fault proxy
//! in front of the registry holds every layer GET after its response head, and the pull only
//! goes on once all of them are in flight at the same time (a serial pull would wait on the
//! first hold forever and the test time out). The zone root is the same as from a serial
//! pull (`max_concurrent_downloads = 1`), layers applied in manifest order.

use std::time::Duration;

use crate::fault_proxy::{Fault, FaultProxy, Rule};
use crate::util::{Server, tail, tempdir};
use crate::worker_e2e::{Node, RawImage, assert_same_root};

const LAYERS: usize = 3;

#[test]
fn layers_download_concurrently_and_unpack_as_a_serial_pull_does() {
    let t = tempdir();
    let server = Server::start(&t.path().join("registry"), &[]);
    let img = RawImage::layered("layers", LAYERS);
    img.push(server.addr, "apps/layers", "1");
    let layer_paths: Vec<String> = (0..LAYERS)
        .map(|i| format!("/blobs/{}", img.layer_digest(i)))
        .collect();
    let proxy = FaultProxy::start(
        server.addr,
        layer_paths
            .iter()
            .map(|p| Rule {
                method: "GET",
                path: p.clone(),
                times: 1,
                fault: Fault::Hold(0),
            })
            .collect(),
    );

    let concurrent = Node::new(&t.path().join("concurrent"));
    concurrent.zone("web", &format!("{}/apps/layers:1", proxy.host()));
    let run = std::thread::spawn(move || (concurrent.run_once(), concurrent));
    proxy.wait_for(
        Duration::from_secs(30),
        "every layer GET held at the same time",
        |seen| {
            layer_paths.iter().all(|p| {
                seen.iter()
                    .any(|s| s.method == "GET" && s.path.contains(p.as_str()))
            })
        },
    );
    proxy.release();
    let (out, concurrent) = run.join().unwrap();
    assert!(
        out.status.success(),
        "worker failed:\n{}",
        tail(&out.stderr)
    );
    assert_eq!(concurrent.status()["web"]["phase"], "Ready");

    let serial = pull_one_layer_at_a_time(
        &t.path().join("serial"),
        &format!("{}/apps/layers:1", server.host()),
    );
    assert_eq!(
        std::fs::read_to_string(serial.root("web").join("order")).unwrap(),
        format!("layers written by layer {}\n", LAYERS - 1)
    );
    assert_same_root(
        "concurrent vs serial pull",
        &concurrent.root("web"),
        &serial.root("web"),
    );
}

/// A node in `dir` that pulls `image` into zone `web` downloading one layer at a time, the
/// reference root the faster pulls must match.
fn pull_one_layer_at_a_time(dir: &std::path::Path, image: &str) -> Node {
    let serial = Node::new(dir);
    let config = std::fs::read_to_string(serial.config()).unwrap().replace(
        "[provisioner]",
        "max_concurrent_downloads = 1\n[provisioner]",
    );
    std::fs::write(serial.config(), config).unwrap();
    serial.zone("web", image);
    let out = serial.run_once();
    assert!(
        out.status.success(),
        "worker failed:\n{}",
        tail(&out.stderr)
    );
    serial
}

/// Every file name (not path) under `dir`, recursively; empty when `dir` is missing.
fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            } else {
                out.push(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

/// Unpacking starts before the downloads end: the proxy holds the last layer's body, and the
/// first layers' files must appear in the staging root meanwhile (a pull that unpacks only
/// after the last download would never get there, and the wait below would time out). The
/// zone root is the same as from a pull that downloads one layer at a time.
#[test]
fn layers_are_unpacked_while_the_last_one_still_downloads() {
    let t = tempdir();
    let server = Server::start(&t.path().join("registry"), &[]);
    let img = RawImage::layered("overlap", LAYERS);
    img.push(server.addr, "apps/overlap", "1");
    let last = format!("/blobs/{}", img.layer_digest(LAYERS - 1));
    let proxy = FaultProxy::start(
        server.addr,
        vec![Rule {
            method: "GET",
            path: last.clone(),
            times: 1,
            fault: Fault::Hold(0),
        }],
    );
    let node = Node::new(&t.path().join("overlap"));
    node.zone("web", &format!("{}/apps/overlap:1", proxy.host()));
    let staging = node.zonepath(".staging");
    let run = std::thread::spawn(move || (node.run_once(), node));
    proxy.wait_for(Duration::from_secs(30), "the last layer held", |seen| {
        seen.iter()
            .any(|s| s.method == "GET" && s.path.contains(last.as_str()))
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let before_last = (0..LAYERS - 1)
        .map(|i| format!("layer-{i}"))
        .collect::<Vec<_>>();
    loop {
        let seen = files_under(&staging);
        if before_last.iter().all(|f| seen.contains(f)) {
            assert!(
                !seen.contains(&format!("layer-{}", LAYERS - 1)),
                "the held layer cannot be applied yet: {seen:?}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the first layers were not unpacked while the last one was held; staging: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    proxy.release();
    let (out, node) = run.join().unwrap();
    assert!(
        out.status.success(),
        "worker failed:\n{}",
        tail(&out.stderr)
    );
    assert_eq!(node.status()["web"]["phase"], "Ready");
    assert!(
        files_under(&staging).is_empty(),
        "the staging root was handed over"
    );

    let serial = pull_one_layer_at_a_time(
        &t.path().join("serial"),
        &format!("{}/apps/overlap:1", server.host()),
    );
    assert_eq!(
        std::fs::read_to_string(node.root("web").join("order")).unwrap(),
        format!("overlap written by layer {}\n", LAYERS - 1)
    );
    assert_same_root(
        "overlapped vs one-at-a-time pull",
        &node.root("web"),
        &serial.root("web"),
    );
}

/// A layer whose body arrives with every byte changed (same length) fails the zone with the
/// blob's digest named, although its unpack had already started: no zone, no staging root, no
/// partial download and no blob of it in the content store; the first layer's blob stays.
#[test]
fn a_corrupted_layer_body_fails_naming_the_blob_and_leaves_nothing_behind() {
    let t = tempdir();
    let server = Server::start(&t.path().join("registry"), &[]);
    let img = RawImage::layered("corrupt", LAYERS);
    img.push(server.addr, "apps/corrupt", "1");
    let bad = img.layer_digest(1);
    let proxy = FaultProxy::start(
        server.addr,
        vec![Rule {
            method: "GET",
            path: format!("/blobs/{bad}"),
            times: u32::MAX,
            fault: Fault::Corrupt,
        }],
    );
    let node = Node::new(&t.path().join("node"));
    node.zone("web", &format!("{}/apps/corrupt:1", proxy.host()));
    let out = node.run_once();
    assert_eq!(out.status.code(), Some(1), "{}", tail(&out.stderr));
    let row = &node.status()["web"];
    assert_eq!(row["phase"], "Failed", "{row:#}");
    assert_eq!(row["failed_blob"].as_str(), Some(bad.as_str()), "{row:#}");
    let err = row["last_error"].as_str().unwrap();
    assert!(
        err.contains("digest mismatch") && err.contains(bad.as_str()),
        "{err}"
    );
    assert!(!node.zonepath("web").exists(), "no zone was created");
    assert!(files_under(&node.zonepath(".staging")).is_empty());
    // No partial file of the bad blob (a later layer's download, cut when the pull failed,
    // may keep its partial file for a resume).
    let content = t.path().join("node/state/content");
    let bad_hex = bad.trim_start_matches("sha256:");
    assert!(
        !files_under(&content.join("ingest"))
            .iter()
            .any(|f| f.contains(bad_hex)),
        "{:?}",
        files_under(&content.join("ingest"))
    );
    let blobs = files_under(&content.join("blobs"));
    assert!(!blobs.contains(&bad_hex.to_owned()));
    let good = img.layer_digest(0);
    assert!(blobs.contains(&good.trim_start_matches("sha256:").to_owned()));
}

/// A second zone on an image whose layers are in the content store downloads none of them
/// again (it unpacks them from the store) and gets the same root.
#[test]
fn a_second_pull_of_the_same_layers_fetches_none() {
    let t = tempdir();
    let server = Server::start(&t.path().join("registry"), &[]);
    let img = RawImage::layered("again", LAYERS);
    img.push(server.addr, "apps/again", "1");
    let proxy = FaultProxy::start(server.addr, Vec::new());
    let node = Node::new(&t.path().join("node"));
    let image = format!("{}/apps/again:1", proxy.host());
    node.zone("first", &image);
    let out = node.run_once();
    assert!(out.status.success(), "{}", tail(&out.stderr));
    node.zone("second", &image);
    let out = node.run_once();
    assert!(out.status.success(), "{}", tail(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("provisioned: second; unchanged: first;"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for i in 0..LAYERS {
        let gets = proxy
            .seen_for(&img.layer_digest(i))
            .into_iter()
            .filter(|s| s.method == "GET")
            .count();
        assert_eq!(gets, 1, "layer {i} was fetched {gets} times");
    }
    assert_same_root(
        "from the store vs downloaded",
        &node.root("second"),
        &node.root("first"),
    );
}
