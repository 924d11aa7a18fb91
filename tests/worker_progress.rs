//! Byte progress of the worker's pulls, under the contract `rdctl pull` follows
//! (`registry_client::progress`, checked as tests/transfer_progress.rs checks copies): the
//! content store reports each download against the real `rdctl registry serve` (a blob it
//! has is present, a download cut short finishes failed and the next one resumes from what
//! arrived); `rdctl worker run --once` draws bars on a terminal, logs a line every few
//! seconds without one, and on ctrl-c says what the content store kept and that a rerun
//! resumes, which it does.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use registry_client::progress::BlobOutcome;
use registry_client::transfer::Content;
use validator::{Digest, Name};
use worker_runtime::ContentStore;

use crate::fault_proxy::{Fault, FaultProxy, Rule};
use crate::package_search::put_blob;
use crate::transfer_progress::{Recorder, Seen, noise};
use crate::util::{Server, ok, rdctl, s, tail, tempdir};
use crate::worker_e2e::{Node, RawImage};

fn content(digest: &str, size: usize) -> Content {
    Content {
        digest: Digest::parse(digest).unwrap(),
        size: size as u64,
        media_type: "application/octet-stream".to_owned(),
    }
}

#[test]
fn content_store_reports_downloads_present_blobs_and_a_resumed_one() {
    let t = tempdir();
    let server = Server::start(&t.path().join("data"), &[]);
    let config = br#"{"architecture":"amd64","os":"illumos"}"#.to_vec();
    let layer = noise(3 << 20).into_bytes();
    let repo = "w/progress";
    let (config_c, layer_c) = (
        content(&put_blob(&server, repo, &config), config.len()),
        content(&put_blob(&server, repo, &layer), layer.len()),
    );
    const CUT_AT: u64 = 1 << 20;
    let proxy = FaultProxy::start(
        server.addr,
        vec![Rule {
            method: "GET",
            path: layer_c.digest.to_string(),
            times: 1,
            fault: Fault::Reset(CUT_AT),
        }],
    );
    let rec = Arc::new(Recorder::default());
    let store = ContentStore::open(&t.path().join("content"), "node")
        .unwrap()
        .with_progress(rec.clone());
    let client = registry_client::Client::builder()
        .retry(registry_client::Retry {
            attempts: 1,
            ..Default::default()
        })
        .build()
        .unwrap();
    let name = Name::parse(repo).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fetch = |host: &str, c: &Content| {
        rt.block_on(store.fetch(&client, host, &name, &c.digest, c.size, None))
    };

    // The layer's GET is cut after CUT_AT bytes: started, those bytes, finished failed; the
    // partial file keeps them.
    let e = fetch(&proxy.host(), &layer_c).unwrap_err();
    assert!(
        matches!(e, worker_runtime::StoreError::Download { .. }),
        "{}",
        validator::error_chain(&e)
    );
    let calls = std::mem::take(&mut *rec.calls.lock().unwrap());
    let want = layer_c.digest.to_string();
    assert!(calls.iter().all(|(d, _)| *d == want), "{calls:?}");
    assert_eq!(
        calls.first().map(|c| &c.1),
        Some(&Seen::Started {
            size: layer_c.size,
            resumed: 0
        })
    );
    assert_eq!(
        calls.last().map(|c| &c.1),
        Some(&Seen::Finished(BlobOutcome::Failed))
    );
    let reported: u64 = calls
        .iter()
        .filter_map(|(_, s)| match s {
            Seen::Bytes(n) => Some(*n),
            _ => None,
        })
        .sum();
    let kept = std::fs::metadata(store.partial_path(&layer_c.digest))
        .unwrap()
        .len();
    assert_eq!(reported, kept, "{calls:?}");
    assert!(kept > 0 && kept <= CUT_AT, "{kept}");

    // Both blobs: the layer resumes from the partial file, the config moves whole.
    let host = server.host();
    let (_, stats) = fetch(&host, &layer_c).unwrap();
    assert_eq!(stats.resumed_from, kept);
    fetch(&host, &config_c).unwrap();
    let resumed = rec.check_blobs(
        "the second fetch",
        &[layer_c.clone(), config_c.clone()],
        &[],
    );
    assert_eq!(resumed[&want], kept);
    assert_eq!(resumed[&config_c.digest.to_string()], 0);
    assert_eq!(
        std::fs::read(store.blob_path(&layer_c.digest)).unwrap(),
        layer
    );

    // Fetched again: each is present, once, and nothing moves.
    fetch(&host, &layer_c).unwrap();
    fetch(&host, &config_c).unwrap();
    rec.check_blobs("in the store", &[], &[layer_c, config_c]);
    drop((proxy, server));
}

/// A node pulling a 6 MiB layer through a proxy that holds it after `held_at` bytes; the
/// zone's image reference, the layer digest and the partial download's path.
struct HeldPull {
    _t: tempfile::TempDir,
    _server: Server,
    proxy: FaultProxy,
    node: Node,
    node_dir: std::path::PathBuf,
    layer: String,
    partial: std::path::PathBuf,
    held_at: u64,
}

impl HeldPull {
    fn new(held_at: u64) -> HeldPull {
        let t = tempdir();
        let server = Server::start(&t.path().join("registry"), &[]);
        let big = RawImage::big("progress", 6 << 20);
        big.push(server.addr, "progress/big", "1");
        let layer = big.layer_digest(0);
        let proxy = FaultProxy::start(
            server.addr,
            vec![Rule {
                method: "GET",
                path: layer.clone(),
                times: 1,
                fault: Fault::Hold(held_at),
            }],
        );
        let node_dir = t.path().join("node");
        let node = Node::new(&node_dir);
        node.zone("big", &format!("{}/progress/big:1", proxy.host()));
        let partial = node_dir.join(format!(
            "state/content/ingest/sha256-{}.partial",
            layer.trim_start_matches("sha256:")
        ));
        HeldPull {
            _t: t,
            _server: server,
            proxy,
            node,
            node_dir,
            layer,
            partial,
            held_at,
        }
    }

    /// Waits until the held bytes are in the partial file.
    fn wait_held(&self) {
        let held_at = self.held_at;
        self.proxy
            .wait_for(Duration::from_secs(60), "the held layer GET", |seen| {
                seen.iter().any(|s| s.fault == Some(Fault::Hold(held_at)))
            });
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::fs::metadata(&self.partial).map_or(0, |m| m.len()) < held_at {
            assert!(
                Instant::now() < deadline,
                "{} never held {held_at} bytes",
                self.partial.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn worker(&self) -> Command {
        let mut c = rdctl();
        c.args([
            "worker",
            "run",
            "--once",
            "--config",
            s(&self.node.config()),
        ])
        .env("RDCTL_LOG", "info")
        .env("NO_COLOR", "1");
        c
    }
}

/// Reads a child's output as it comes, for tests that wait for something to be printed.
struct Collected(Arc<Mutex<Vec<u8>>>, std::thread::JoinHandle<()>);

impl Collected {
    fn start(mut from: impl std::io::Read + Send + 'static) -> Collected {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let b = buf.clone();
        let reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = from.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                b.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        Collected(buf, reader)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    fn wait_for(&self, what: &str, f: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !f(&self.text()) {
            assert!(
                Instant::now() < deadline,
                "never printed {what}:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn finish(self) -> String {
        self.1.join().unwrap();
        let out = self.0.lock().unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }
}

#[test]
fn ctrl_c_says_what_the_content_store_kept_and_a_rerun_resumes() {
    let p = HeldPull::new(2 << 20);
    let child = p
        .worker()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    p.wait_held();
    ok(Command::new("kill").args(["-INT", &child.id().to_string()]));
    let o = child.wait_with_output().unwrap();
    p.proxy.release();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    let content = p.node_dir.join("state/content");
    // The config was complete; the layer stopped midway and stays in ingest/.
    for want in [
        "interrupted: 1 blob(s) (".to_owned(),
        format!(
            "bytes) are complete at the content store {} and kept; 1 blob(s) were stopped \
             midway (the content store keeps what arrived in {}, and the next run continues \
             it)",
            content.display(),
            content.join("ingest").display()
        ),
        "Run the same command again to resume".to_owned(),
    ] {
        assert!(err.contains(&want), "{want}:\n{err}");
    }
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(std::fs::metadata(&p.partial).unwrap().len() >= p.held_at);
    assert!(
        !p.node.zonepath("big").exists(),
        "no zone from a partial pull"
    );

    // The rerun continues the layer from what arrived, and the zone comes up.
    let o = p.node.run_once();
    assert!(o.status.success(), "{}", tail(&o.stderr));
    let gets = p.proxy.seen_for(&p.layer);
    assert_eq!(gets.len(), 2, "{gets:#?}");
    let from: u64 = gets[1]
        .range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(from >= p.held_at, "{gets:#?}");
    assert!(p.node.root("big").join("big.bin").is_file());
}

#[test]
fn without_a_terminal_the_worker_logs_progress_every_few_seconds() {
    let p = HeldPull::new(1 << 20);
    let mut child = p
        .worker()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = Collected::start(child.stderr.take().unwrap());
    p.wait_held();
    // Held past one interval: the bytes after the release are the first to log.
    std::thread::sleep(worker_runtime::LOG_INTERVAL + Duration::from_millis(300));
    p.proxy.release();
    let status = child.wait().unwrap();
    let err = err.finish();
    assert!(status.success(), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("pulling: ")).collect();
    // One line per interval at most: the pull took little more than one.
    assert!(
        (1..=2).contains(&lines.len()),
        "{lines:#?}\n{}",
        tail(err.as_bytes())
    );
    assert!(
        lines[0].contains(" INFO ") && lines[0].contains(" in 1 download(s), "),
        "{}",
        lines[0]
    );
    assert!(
        !err.contains('\r') && !err.contains("[="),
        "bars on a pipe: {err}"
    );
}

#[test]
fn on_a_terminal_the_worker_draws_a_bar_per_download() {
    let p = HeldPull::new(1 << 20);
    // script(1) gives the worker a terminal; its output is what the terminal showed.
    let cmd = p.worker();
    let line: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| shell_quote(a.to_str().unwrap()))
        .collect();
    let mut child = Command::new("script")
        .args(["-qefc", &line.join(" "), "/dev/null"])
        .env("RDCTL_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let screen = Collected::start(child.stdout.take().unwrap());
    p.wait_held();
    let short = &p.layer[..19];
    screen.wait_for("the layer's bar", |t| {
        t.lines()
            .any(|l| l.contains(short) && l.contains("MiB") && l.contains('['))
    });
    p.proxy.release();
    let status = child.wait().unwrap();
    let shown = screen.finish();
    assert!(status.success(), "{shown}");
    assert!(
        !shown.contains("pulling: "),
        "log lines on a terminal: {shown}"
    );
}

fn shell_quote(a: &str) -> String {
    format!("'{}'", a.replace('\'', "'\\''"))
}
