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

    let serial = Node::new(&t.path().join("serial"));
    let mut config = std::fs::read_to_string(serial.config()).unwrap();
    config = config.replace(
        "[provisioner]",
        "max_concurrent_downloads = 1\n[provisioner]",
    );
    std::fs::write(serial.config(), config).unwrap();
    serial.zone("web", &format!("{}/apps/layers:1", server.host()));
    let out = serial.run_once();
    assert!(
        out.status.success(),
        "worker failed:\n{}",
        tail(&out.stderr)
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
