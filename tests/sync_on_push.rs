//! Replication on push (issue 35): a `[[sync]]` entry with `to` and `on_push = true` copies
//! what is pushed to our registry into CNCF distribution v3 through the event outbox. A push
//! made while the destination cannot be reached, followed at once by `kill -9` of the
//! registry, is still replicated once the registry is back (the event was in the store before
//! the push was answered); a push with the destination up arrives within seconds; a
//! repository the entry's globs do not select is not copied.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::signing::pushed_image;
use crate::sync::head_digest;
use crate::util::{Distribution, Server, s, tempdir};

/// A TCP forwarder to `upstream` that drops every connection while closed: a destination
/// that is down and comes back at the same address.
struct Gate {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
}

impl Gate {
    fn start(upstream: SocketAddr) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(false));
        let flag = open.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(client) = conn else { continue };
                if !flag.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                let pipe = |mut from: TcpStream, mut to: TcpStream| {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 << 10];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Write);
                    });
                };
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
        Gate { addr, open }
    }
}

/// Waits until `repo:tag` at `addr` names a manifest; its digest.
fn arrives(
    addr: SocketAddr,
    repo: &str,
    tag: &str,
    within: Duration,
    log: &dyn Fn() -> String,
) -> String {
    let start = Instant::now();
    loop {
        if let Some(d) = head_digest(addr, repo, tag) {
            return d;
        }
        assert!(
            start.elapsed() < within,
            "{repo}:{tag} not replicated within {within:?}; registry log:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn config(d: &Path, to: &str) -> std::path::PathBuf {
    let cfg = d.join("registry.toml");
    std::fs::write(
        &cfg,
        format!(
            "[notifications]\npoll_interval = \"200ms\"\nlease = \"2s\"\n\n\
             [[sync]]\nname = \"dr\"\nto = \"http://{to}/dr\"\non_push = true\n\
             repositories = [\"apps/**\"]\n"
        ),
    )
    .unwrap();
    cfg
}

#[test]
fn a_push_replicates_even_when_the_registry_is_killed_right_after_it() {
    let dir = tempdir();
    let d = dir.path();
    let store = tempdir();
    let dist = Distribution::start_v3(
        store.path(),
        &format!(
            "  filesystem:\n    rootdirectory: {}\n",
            s(&store.path().join("data"))
        ),
    );
    let gate = Gate::start(dist.addr());
    let cfg = config(d, &gate.addr.to_string());
    let data = tempdir();

    // The destination is down; the push is answered, and the registry dies at once.
    let reg = Server::start(data.path(), &["--config", s(&cfg)]);
    let pushed = pushed_image(
        d,
        "replicated after a kill\n",
        &format!("{}/apps/web:1.0", reg.host()),
    );
    reg.signal("-9");
    drop(reg);
    assert_eq!(head_digest(dist.addr(), "dr/apps/web", "1.0"), None);
    let outbox = data.path().join("_rd/events/sync.dr");
    let pending = std::fs::read_dir(&outbox)
        .map(|r| r.count())
        .unwrap_or_else(|e| panic!("no outbox at {}: {e}", outbox.display()));
    assert!(pending >= 1, "nothing pending in {}", outbox.display());

    // Back up, destination reachable: the pending replication runs.
    gate.open.store(true, Ordering::SeqCst);
    let reg = Server::start(data.path(), &["--config", s(&cfg)]);
    let got = arrives(
        dist.addr(),
        "dr/apps/web",
        "1.0",
        Duration::from_secs(30),
        &|| reg.log_tail(),
    );
    assert_eq!(got, pushed);

    // A repository the globs do not select stays here; a selected one arrives in seconds.
    pushed_image(
        d,
        "not selected by the apps/** glob\n",
        &format!("{}/other/tool:1.0", reg.host()),
    );
    let second = pushed_image(
        d,
        "replicated within seconds\n",
        &format!("{}/apps/api:2.0", reg.host()),
    );
    let got = arrives(
        dist.addr(),
        "dr/apps/api",
        "2.0",
        Duration::from_secs(10),
        &|| reg.log_tail(),
    );
    assert_eq!(got, second);
    assert_eq!(head_digest(dist.addr(), "dr/other/tool", "1.0"), None);
    let log = reg.log_tail();
    assert!(log.contains("replicated on push"), "{log}");
}
