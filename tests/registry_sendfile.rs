//! Blob GETs on plain HTTP sent with `sendfile(2)` from the filesystem store (issue 52): the
//! bytes are the blob's, whole and in ranges, the path is taken (its metric counts them), a
//! client that leaves mid-blob does not disturb the server, and a blob whose file is removed
//! while it is being sent (by hand, by a real `rdctl registry gc` and by a real
//! `rdctl registry scrub` quarantine) is sent whole from the open file or cut, never with wrong
//! bytes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::registry_e2e::{header, http};
use crate::registry_gc::{gc_json, push_blob as push};
use crate::util::{Server, rdctl, s, tempdir};

/// A blob of `len` bytes that no shift of itself repeats (so a byte from a wrong offset shows).
fn blob(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn sent_from_file(server: &Server) -> u64 {
    let (_, _, metrics) = http(server.addr, "GET", "/metrics", &[], b"");
    String::from_utf8_lossy(&metrics)
        .lines()
        .find_map(|l| l.strip_prefix("registry_blob_bytes_sent_from_file_total "))
        .expect("the sendfile metric")
        .trim()
        .parse()
        .unwrap()
}

/// The stored file of blob `digest` (its bytes, wherever its epoch put them).
fn blob_file(data: &Path, digest: &str) -> PathBuf {
    let hex = digest.trim_start_matches("sha256:");
    let mut stack = vec![data.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.strip_prefix(data).is_ok_and(|rel| {
                let rel = rel.to_string_lossy();
                rel.starts_with("blobs/") && rel.contains(hex)
            }) && p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("data"))
            {
                return p;
            }
        }
    }
    panic!("no stored file for {digest} under {}", data.display());
}

/// Sends a GET and reads the response head; the stream is left at the body's first byte.
fn start_get(server: &Server, path: &str) -> (TcpStream, Vec<u8>) {
    let mut c = TcpStream::connect(server.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        server.addr
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "no response head");
        got.extend_from_slice(&buf[..n]);
        if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let body = got.split_off(at + 4);
            assert!(
                got.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&got)
            );
            return (c, body);
        }
    }
}

#[test]
fn blob_gets_on_plain_http_are_sent_from_the_file_byte_for_byte() {
    let data = tempdir();
    // Every read from the file, ranges of a few bytes too (see the threshold's test below).
    let server = Server::start_with_env(data.path(), &[("RDCTL_REGISTRY_SENDFILE_MIN_SIZE", "0")]);
    // Over two mapped windows (2 MiB each) and not a multiple of a page.
    let bytes = blob(5 * 1024 * 1024 + 123, 1);
    let d = push(&server, "zc/one", &bytes);
    let before = sent_from_file(&server);

    let (status, h, body) = http(
        server.addr,
        "GET",
        &format!("/v2/zc/one/blobs/{d}"),
        &[],
        b"",
    );
    assert_eq!(status, 200);
    assert_eq!(header(&h, "content-length"), bytes.len().to_string());
    assert_eq!(header(&h, "docker-content-digest"), d);
    assert!(body == bytes, "the body differs from the blob");

    // Ranges, across a window boundary and at the end.
    for (from, to) in [
        (1000usize, 3_000_000usize),
        (2 * 1024 * 1024 - 7, 2 * 1024 * 1024 + 9),
        (bytes.len() - 5, bytes.len() - 1),
    ] {
        let range = format!("bytes={from}-{to}");
        let (status, h, body) = http(
            server.addr,
            "GET",
            &format!("/v2/zc/one/blobs/{d}"),
            &[("range", &range)],
            b"",
        );
        assert_eq!(status, 206, "{range}");
        assert_eq!(
            header(&h, "content-range"),
            format!("bytes {from}-{to}/{}", bytes.len())
        );
        assert!(body == bytes[from..=to], "{range}: wrong bytes");
    }
    let sent = sent_from_file(&server) - before;
    assert!(
        sent >= bytes.len() as u64,
        "only {sent} bytes were sent from the file for a {} byte blob and its ranges",
        bytes.len()
    );
}

/// `sendfile = false` (here from the environment) writes the same bytes from the mapping.
#[test]
fn with_sendfile_off_the_same_bytes_are_written_from_the_mapping() {
    let data = tempdir();
    let server = Server::start_with_env(data.path(), &[("RDCTL_REGISTRY_SENDFILE", "false")]);
    let bytes = blob(3 * 1024 * 1024 + 1, 5);
    let d = push(&server, "zc/off", &bytes);
    let (status, _, body) = http(
        server.addr,
        "GET",
        &format!("/v2/zc/off/blobs/{d}"),
        &[],
        b"",
    );
    assert_eq!(status, 200);
    assert!(body == bytes, "the body differs from the blob");
    assert_eq!(sent_from_file(&server), 0);
}

/// `sendfile_min_size`: a GET of fewer bytes is written from the mapping (nothing counted as
/// sent from the file), one of exactly that many or more is sent from the file; the bytes are
/// the blob's on both sides.
#[test]
fn gets_below_the_sendfile_threshold_are_copied_and_from_it_on_sent() {
    let data = tempdir();
    let server =
        Server::start_with_env(data.path(), &[("RDCTL_REGISTRY_SENDFILE_MIN_SIZE", "1MiB")]);
    let mib = 1024 * 1024;
    let small = blob(mib - 1, 6);
    let at = blob(mib, 7);
    let big = blob(3 * mib + 5, 8);
    let (ds, da, db) = (
        push(&server, "zc/min", &small),
        push(&server, "zc/min", &at),
        push(&server, "zc/min", &big),
    );
    let get = |d: &str, range: Option<String>| {
        let before = sent_from_file(&server);
        let headers: Vec<(&str, &str)> = range.iter().map(|r| ("range", r.as_str())).collect();
        let (status, _, body) = http(
            server.addr,
            "GET",
            &format!("/v2/zc/min/blobs/{d}"),
            &headers,
            b"",
        );
        assert!(status == 200 || status == 206, "{d} {range:?}: {status}");
        (body, sent_from_file(&server) - before)
    };

    let (body, sent) = get(&ds, None);
    assert!(body == small, "one byte under the threshold: wrong bytes");
    assert_eq!(sent, 0, "one byte under the threshold is copied");
    let (body, sent) = get(&da, None);
    assert!(body == at, "right on the threshold: wrong bytes");
    assert!(
        sent >= at.len() as u64,
        "right on the threshold is sent ({sent} bytes)"
    );
    let (body, sent) = get(&db, None);
    assert!(body == big, "over the threshold: wrong bytes");
    assert!(
        sent >= big.len() as u64,
        "over the threshold is sent ({sent} bytes)"
    );
    // The threshold is on the bytes a GET sends, not on the blob: a short range of the big
    // blob is copied, a range of exactly the threshold is sent.
    let (body, sent) = get(&db, Some(format!("bytes=100-{}", 100 + mib - 2)));
    assert!(body == big[100..100 + mib - 1], "short range: wrong bytes");
    assert_eq!(sent, 0, "a range under the threshold is copied");
    let (body, sent) = get(&db, Some(format!("bytes=7-{}", 7 + mib - 1)));
    assert!(body == big[7..7 + mib], "threshold range: wrong bytes");
    assert!(
        sent >= mib as u64,
        "a range of the threshold is sent ({sent} bytes)"
    );
}

#[test]
fn a_client_that_leaves_mid_blob_does_not_disturb_the_server() {
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    let bytes = blob(32 * 1024 * 1024, 2);
    let d = push(&server, "zc/leave", &bytes);
    for _ in 0..4 {
        let (mut c, mut body) = start_get(&server, &format!("/v2/zc/leave/blobs/{d}"));
        let mut buf = vec![0u8; 64 * 1024];
        let n = c.read(&mut buf).unwrap();
        body.extend_from_slice(&buf[..n]);
        assert!(bytes.starts_with(&body));
        drop(c);
    }
    let (status, _, body) = http(
        server.addr,
        "GET",
        &format!("/v2/zc/leave/blobs/{d}"),
        &[],
        b"",
    );
    assert_eq!(status, 200);
    assert!(body == bytes, "the body differs from the blob");
}

#[test]
fn a_blob_removed_while_it_is_sent_is_sent_whole_or_cut_never_wrong() {
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    let bytes = blob(64 * 1024 * 1024, 3);
    let d = push(&server, "zc/gone", &bytes);
    let file = blob_file(data.path(), &d);
    let (mut c, mut body) = get_some(&server, "zc/gone", &d, 1024 * 1024);
    // What garbage collection (or a quarantine) does to the key: the file is unlinked; a new
    // file with other bytes may take its name.
    std::fs::remove_file(&file).unwrap();
    std::fs::write(&file, blob(bytes.len(), 4)).unwrap();
    read_rest(&mut c, &mut body);
    assert!(body.len() <= bytes.len());
    assert!(
        bytes.starts_with(&body),
        "wrong bytes after the file was replaced ({} of {} sent)",
        body.len(),
        bytes.len()
    );
    assert_eq!(body.len(), bytes.len(), "the open file is sent whole");
}

/// Reads the rest of a response body; what a cut connection delivered is what it delivered.
fn read_rest(c: &mut TcpStream, body: &mut Vec<u8>) {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
}

/// Starts a GET of blob `d` in `repo` and reads at least `first` bytes of its body.
fn get_some(server: &Server, repo: &str, d: &str, first: usize) -> (TcpStream, Vec<u8>) {
    let (mut c, mut body) = start_get(server, &format!("/v2/{repo}/blobs/{d}"));
    let mut buf = vec![0u8; 256 * 1024];
    while body.len() < first {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "the body ended after {} bytes", body.len());
        body.extend_from_slice(&buf[..n]);
    }
    (c, body)
}

#[test]
fn a_blob_garbage_collected_while_it_is_sent_is_sent_whole() {
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    let bytes = blob(64 * 1024 * 1024, 5);
    let d = push(&server, "zc/collected", &bytes);
    let file = blob_file(data.path(), &d);
    let (mut c, mut body) = get_some(&server, "zc/collected", &d, 1024 * 1024);
    // Unreferenced (its only link deleted), then a real collection with no grace window, online
    // beside the serving registry.
    let (status, _, _) = http(
        server.addr,
        "DELETE",
        &format!("/v2/zc/collected/blobs/{d}"),
        &[],
        b"",
    );
    assert_eq!(status, 202);
    let report = gc_json(data.path(), &["--grace", "0"]);
    assert_eq!(report["deleted_blobs"], 1, "{report:#}");
    assert!(!file.exists(), "the collection left {}", file.display());
    read_rest(&mut c, &mut body);
    assert!(
        body == bytes,
        "{} of {} bytes, or wrong ones, after the blob was collected",
        body.len(),
        bytes.len()
    );
    let (status, _, _) = http(
        server.addr,
        "GET",
        &format!("/v2/zc/collected/blobs/{d}"),
        &[],
        b"",
    );
    assert_eq!(status, 404, "the collected blob still answers");
}

#[test]
fn a_blob_quarantined_while_it_is_sent_is_sent_whole_or_cut_never_wrong() {
    use std::os::unix::fs::{FileExt as _, PermissionsExt as _};
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    let bytes = blob(64 * 1024 * 1024, 6);
    let d = push(&server, "zc/rot", &bytes);
    let file = blob_file(data.path(), &d);
    let (mut c, mut body) = get_some(&server, "zc/rot", &d, 48 * 1024 * 1024);
    // A bit rots in place, in bytes the client has already read (a byte it has not read yet
    // would reach it rotten from any server: the page cache is the disk's), and a real scrub
    // finds it and quarantines the blob while the rest is sent.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.write_all_at(&[bytes[3] ^ 0x20], 3).unwrap();
    drop(f);
    let out = rdctl()
        .args(["registry", "scrub", "--json", "--data", s(data.path())])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report.to_string().contains(d.trim_start_matches("sha256:")),
        "the scrub did not name {d}: {report:#}"
    );
    assert!(!file.exists(), "the scrub left {}", file.display());
    read_rest(&mut c, &mut body);
    assert!(body.len() <= bytes.len());
    assert!(
        bytes.starts_with(&body),
        "wrong bytes after the blob was quarantined ({} of {} sent)",
        body.len(),
        bytes.len()
    );
    let (status, _, _) = http(
        server.addr,
        "GET",
        &format!("/v2/zc/rot/blobs/{d}"),
        &[],
        b"",
    );
    assert_eq!(status, 404, "the quarantined blob still answers");
}
