//! The byte-progress contract of `registry_client::transfer::copy_with_progress` over every
//! kind of copy (layout to registry, registry to layout, registry to registry, a resumed
//! download, a converged rerun) against the real `rdctl registry serve`, and that `rdctl push`,
//! `pull` and `copy` print no progress when stderr is not a terminal.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use registry_client::progress::{BlobOutcome, BlobProgress, Progress};
use registry_client::transfer::{Content, CopyOptions, CopyReport, ImageRef, copy_with_progress};

use crate::transfer::umoci_image;
use crate::util::{Server, ok, rdctl, s, tempdir};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    Started { size: u64, resumed: u64 },
    Bytes(u64),
    Finished(BlobOutcome),
    Present,
}

/// Records every call, per blob digest.
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) calls: Arc<Mutex<Vec<(String, Seen)>>>,
}

struct Handle {
    digest: String,
    calls: Arc<Mutex<Vec<(String, Seen)>>>,
}

impl BlobProgress for Handle {
    fn advance(&self, bytes: u64) {
        self.calls
            .lock()
            .unwrap()
            .push((self.digest.clone(), Seen::Bytes(bytes)));
    }
    fn finish(&self, outcome: BlobOutcome) {
        self.calls
            .lock()
            .unwrap()
            .push((self.digest.clone(), Seen::Finished(outcome)));
    }
}

impl Progress for Recorder {
    fn blob_started(&self, blob: &Content, resumed: u64) -> Box<dyn BlobProgress> {
        self.calls.lock().unwrap().push((
            blob.digest.to_string(),
            Seen::Started {
                size: blob.size,
                resumed,
            },
        ));
        Box::new(Handle {
            digest: blob.digest.to_string(),
            calls: self.calls.clone(),
        })
    }
    fn blob_present(&self, blob: &Content) {
        self.calls
            .lock()
            .unwrap()
            .push((blob.digest.to_string(), Seen::Present));
    }
}

impl Recorder {
    /// Checks the contract against what the copy reported, and returns each copied blob's
    /// `resumed` count.
    fn check(&self, what: &str, report: &CopyReport) -> BTreeMap<String, u64> {
        self.check_blobs(what, &report.blobs_copied, &report.blobs_skipped)
    }

    /// Checks the contract for blobs that moved (`copied`) and blobs that were already at the
    /// destination (`skipped`), and returns each moved blob's `resumed` count.
    pub(crate) fn check_blobs(
        &self,
        what: &str,
        copied: &[Content],
        skipped: &[Content],
    ) -> BTreeMap<String, u64> {
        let calls = std::mem::take(&mut *self.calls.lock().unwrap());
        let mut per: BTreeMap<String, Vec<Seen>> = BTreeMap::new();
        for (d, seen) in calls {
            per.entry(d).or_default().push(seen);
        }
        let mut resumed_by = BTreeMap::new();
        for b in copied {
            let seen = per
                .remove(&b.digest.to_string())
                .unwrap_or_else(|| panic!("{what}: nothing reported for copied blob {b:?}"));
            let Some(Seen::Started { size, resumed }) = seen.first().cloned() else {
                panic!("{what}: {} did not start first: {seen:?}", b.digest)
            };
            assert_eq!(size, b.size, "{what}: {seen:?}");
            assert_eq!(
                seen.last(),
                Some(&Seen::Finished(BlobOutcome::Copied)),
                "{what}: {} must finish last, as copied: {seen:?}",
                b.digest
            );
            let mut bytes = 0;
            for s in &seen[1..seen.len() - 1] {
                match s {
                    Seen::Bytes(n) => bytes += n,
                    other => panic!("{what}: {} reported {other:?} mid-transfer", b.digest),
                }
            }
            assert_eq!(
                resumed + bytes,
                b.size,
                "{what}: {}: resumed {resumed} + {bytes} bytes reported",
                b.digest
            );
            resumed_by.insert(b.digest.to_string(), resumed);
        }
        for b in skipped {
            let seen = per
                .remove(&b.digest.to_string())
                .unwrap_or_else(|| panic!("{what}: nothing reported for skipped blob {b:?}"));
            assert_eq!(seen, vec![Seen::Present], "{what}: {}", b.digest);
        }
        assert!(
            per.is_empty(),
            "{what}: reports for blobs not in the copy: {per:?}"
        );
        resumed_by
    }
}

/// Text that gzip cannot shrink much, so the layer takes many reads.
pub(crate) fn noise(len: usize) -> String {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b"0123456789abcdef"[(x & 15) as usize])
        })
        .collect()
}

async fn copy(src: &str, dst: &str, rec: &Recorder) -> CopyReport {
    let client = registry_client::Client::builder().build().unwrap();
    copy_with_progress(
        &client,
        &ImageRef::parse(src).unwrap(),
        &ImageRef::parse(dst).unwrap(),
        &CopyOptions::default(),
        rec,
    )
    .await
    .unwrap_or_else(|e| panic!("{src} -> {dst}: {}", validator::error_chain(&e)))
}

fn layer_of(report: &CopyReport) -> Content {
    report
        .blobs_copied
        .iter()
        .max_by_key(|b| b.size)
        .cloned()
        .expect("a copied blob")
}

fn blob_file(layout: &Path, c: &Content) -> std::path::PathBuf {
    layout
        .join("blobs/sha256")
        .join(c.digest.as_str().trim_start_matches("sha256:"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_reported_sum_to_blob_sizes_and_each_blob_finishes_once() {
    let tmp = tempdir();
    let dir = tmp.path().to_owned();
    let img = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || umoci_image(&dir, &noise(3 << 20))
    })
    .await
    .unwrap();
    let server = Server::start(&dir.join("data"), &[]);
    let host = server.host();
    let rec = Recorder::default();

    // Layout to registry: every blob moves.
    let pushed = copy(
        &format!("oci:{}:v1", s(&img)),
        &format!("{host}/p/a:v1"),
        &rec,
    )
    .await;
    assert!(pushed.blobs_skipped.is_empty(), "{pushed:?}");
    let resumed = rec.check("push", &pushed);
    assert!(resumed.values().all(|r| *r == 0), "{resumed:?}");
    let layer = layer_of(&pushed);
    assert!(layer.size > 1 << 20, "the layer is {} bytes", layer.size);

    // A converged rerun moves nothing: each blob is reported present, once.
    let again = copy(
        &format!("oci:{}:v1", s(&img)),
        &format!("{host}/p/a:v1"),
        &rec,
    )
    .await;
    assert!(again.blobs_copied.is_empty(), "{again:?}");
    rec.check("push again", &again);

    // Registry to registry.
    let copied = copy(&format!("{host}/p/a:v1"), &format!("{host}/p/b:v1"), &rec).await;
    assert!(!copied.blobs_copied.is_empty(), "{copied:?}");
    rec.check("copy", &copied);

    // Registry to layout.
    let out = dir.join("out");
    let pulled = copy(
        &format!("{host}/p/a:v1"),
        &format!("oci:{}:v1", s(&out)),
        &rec,
    )
    .await;
    rec.check("pull", &pulled);

    // A download cut in half resumes: the first half is reported as resumed, the rest as bytes.
    let file = blob_file(&out, &layer);
    let bytes = std::fs::read(&file).unwrap();
    std::fs::remove_file(&file).unwrap();
    let half = bytes.len() / 2;
    std::fs::create_dir_all(out.join("ingest")).unwrap();
    std::fs::write(
        out.join("ingest").join(format!(
            "sha256-{}.partial",
            layer.digest.as_str().trim_start_matches("sha256:")
        )),
        &bytes[..half],
    )
    .unwrap();
    let resumed_pull = copy(
        &format!("{host}/p/a:v1"),
        &format!("oci:{}:v1", s(&out)),
        &rec,
    )
    .await;
    assert_eq!(
        resumed_pull
            .blobs_copied
            .iter()
            .map(|b| &b.digest)
            .collect::<Vec<_>>(),
        vec![&layer.digest],
        "{resumed_pull:?}"
    );
    let resumed = rec.check("resumed pull", &resumed_pull);
    assert_eq!(resumed[&layer.digest.to_string()], half as u64);
    assert_eq!(std::fs::read(&file).unwrap(), bytes);
    drop(server);
}

#[test]
fn no_progress_output_when_stderr_is_not_a_terminal() {
    let tmp = tempdir();
    let dir = tmp.path();
    let img = umoci_image(dir, &noise(1 << 20));
    let server = Server::start(&dir.join("data"), &[]);
    let remote = format!("{}/q/a:v1", server.host());
    let image = format!("{}:v1", s(&img));
    let out_dir = dir.join("out");
    let out = format!("{}:v1", s(&out_dir));
    let copy_dst = format!("{}/q/b:v1", server.host());
    for args in [
        vec!["push", &image, &remote],
        vec!["pull", &remote, &out],
        vec!["copy", &remote, &copy_dst],
        vec!["push", "--json", &image, &remote],
    ] {
        let o = ok(rdctl().args(&args));
        assert!(
            o.stderr.is_empty(),
            "{args:?} wrote to a piped stderr: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    drop(server);
}

#[test]
fn ctrl_c_says_what_was_kept_and_a_rerun_resumes() {
    use crate::fault_proxy::{Fault, FaultProxy, Rule};
    use std::time::Duration;
    const HELD_AT: u64 = 256 << 10;
    let tmp = tempdir();
    let dir = tmp.path();
    let img = umoci_image(dir, &noise(3 << 20));
    let server = Server::start(&dir.join("data"), &[]);
    ok(rdctl().args([
        "push",
        &format!("{}:v1", s(&img)),
        &format!("{}/i/a:v1", server.host()),
    ]));
    let inspection: serde_json::Value = serde_json::from_slice(
        &ok(rdctl().args(["inspect", "--json", &format!("{}/i/a:v1", server.host())])).stdout,
    )
    .unwrap();
    let layer = inspection["image"]["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let proxy = FaultProxy::start(
        server.addr,
        vec![Rule {
            method: "GET",
            path: format!("/blobs/{layer}"),
            times: 1,
            fault: Fault::Hold(HELD_AT),
        }],
    );
    let out = dir.join("out");
    let args = [
        "pull".to_owned(),
        format!("{}/i/a:v1", proxy.host()),
        format!("{}:v1", s(&out)),
    ];
    let child = rdctl()
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    proxy.wait_for(Duration::from_secs(60), "the held layer GET", |seen| {
        seen.iter().any(|s| s.fault == Some(Fault::Hold(HELD_AT)))
    });
    // The held bytes reach the partial file; then ctrl-c.
    let partial = dir.join(".out.partial/ingest").join(format!(
        "sha256-{}.partial",
        layer.trim_start_matches("sha256:")
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&partial).map_or(0, |m| m.len()) < HELD_AT {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never held {HELD_AT} bytes",
            partial.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    ok(std::process::Command::new("kill").args(["-INT", &child.id().to_string()]));
    let o = child.wait_with_output().unwrap();
    proxy.release();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains(&format!(
            "interrupted: 1 blob(s) ({} bytes) are complete at oci:{}:v1 and kept; 1 blob(s) were stopped midway",
            inspection["image"]["config_size"],
            s(&out)
        )) && err.contains("the tag was not written")
            && err.contains("Run the same command again to resume"),
        "{err}"
    );
    assert!(
        !out.exists(),
        "an interrupted pull left a layout at {}",
        s(&out)
    );
    // The rerun continues the layer from what arrived.
    ok(rdctl().args(&args));
    let gets: Vec<_> = proxy
        .seen_for(&format!("/blobs/{layer}"))
        .into_iter()
        .filter(|s| s.method == "GET")
        .collect();
    assert_eq!(gets.len(), 2, "{gets:#?}");
    let range = gets[1].range.as_deref().unwrap_or("");
    let from: u64 = range
        .strip_prefix("bytes=")
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(from >= HELD_AT, "the rerun asked for {range:?}: {gets:#?}");
    drop((proxy, server));
}

/// Issue 51: an interrupted push says what a push keeps. An upload stopped midway is not
/// kept (the registry drops the unfinished upload; the next run sends that blob again), so
/// the message does not speak of a layout.
#[test]
fn ctrl_c_during_a_push_says_what_a_push_kept() {
    use crate::fault_proxy::{Fault, FaultProxy, Rule};
    use std::time::Duration;
    let tmp = tempdir();
    let dir = tmp.path();
    let img = umoci_image(dir, &noise(1 << 20));
    let server = Server::start(&dir.join("data"), &[]);
    // Every upload request fails with 503, so the client keeps retrying a started blob.
    let proxy = FaultProxy::start(
        server.addr,
        vec![Rule {
            method: "",
            path: "/blobs/uploads/".to_owned(),
            times: u32::MAX,
            fault: Fault::Status(503),
        }],
    );
    let child = rdctl()
        .args([
            "push",
            &format!("{}:v1", s(&img)),
            &format!("{}/i/pushed:v1", proxy.host()),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    proxy.wait_for(Duration::from_secs(60), "a refused upload", |seen| {
        seen.iter().any(|s| s.fault == Some(Fault::Status(503)))
    });
    ok(std::process::Command::new("kill").args(["-INT", &child.id().to_string()]));
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("stopped midway"), "{err}");
    assert!(!err.contains("layout"), "a push speaks of a layout: {err}");
    assert!(err.contains("upload"), "{err}");
    drop((proxy, server));
}

/// Issue 51: an interrupted `rdctl sync` to a registry says what an upload keeps, as push does.
#[test]
fn ctrl_c_during_a_sync_to_a_registry_says_what_an_upload_kept() {
    use crate::fault_proxy::{Fault, FaultProxy, Rule};
    use std::time::Duration;
    let tmp = tempdir();
    let dir = tmp.path();
    let img = umoci_image(dir, &noise(1 << 20));
    let from = Server::start(&dir.join("from"), &[]);
    let to = Server::start(&dir.join("to"), &[]);
    ok(rdctl().args([
        "push",
        &format!("{}:v1", s(&img)),
        &format!("{}/site/app:v1", from.host()),
    ]));
    let proxy = FaultProxy::start(
        to.addr,
        vec![Rule {
            method: "",
            path: "/blobs/uploads/".to_owned(),
            times: u32::MAX,
            fault: Fault::Status(503),
        }],
    );
    let child = rdctl()
        .args(["sync", &format!("{}/site", from.host()), &proxy.host()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    proxy.wait_for(Duration::from_secs(60), "a refused upload", |seen| {
        seen.iter().any(|s| s.fault == Some(Fault::Status(503)))
    });
    ok(std::process::Command::new("kill").args(["-INT", &child.id().to_string()]));
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("stopped midway"), "{err}");
    assert!(
        !err.contains("layout"),
        "a sync to a registry speaks of a layout: {err}"
    );
    drop((proxy, from, to));
}
