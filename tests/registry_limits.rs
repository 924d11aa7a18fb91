//! Connection limits of `rdctl registry serve` against clients that stall: a request head that
//! never ends, an upload body that stops, a response nobody reads. Each must end within its
//! limit (1 s here), with the server still answering others.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::registry_e2e::http;
use crate::registry_gc::push_blob;
use crate::util::{Server, tempdir};

/// A server with every connection limit at 1 s (set through the environment).
fn server(data: &std::path::Path) -> Server {
    Server::start_with_env(
        data,
        &[
            ("RDCTL_REGISTRY_HEADER_READ_TIMEOUT_SECS", "1"),
            ("RDCTL_REGISTRY_BODY_IDLE_TIMEOUT_SECS", "1"),
            ("RDCTL_REGISTRY_WRITE_STALL_TIMEOUT_SECS", "1"),
        ],
    )
}

/// Reads until the server closes the connection; what it sent. Fails if it is still open
/// after `within`.
fn read_until_closed(c: &mut TcpStream, within: Duration) -> Vec<u8> {
    c.set_read_timeout(Some(within)).unwrap();
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!(
                "the connection was still open after {:?} ({e}); read {} bytes",
                start.elapsed(),
                got.len()
            ),
        }
    }
}

fn healthy(server: &Server) {
    let (status, _, _) = http(server.addr, "GET", "/v2/", &[], b"");
    assert_eq!(status, 200);
}

#[test]
fn a_request_head_that_never_ends_is_closed() {
    let data = tempdir();
    let server = server(data.path());
    let mut c = TcpStream::connect(server.addr).unwrap();
    c.write_all(b"GET /v2/ HTTP/1.1\r\nHost: registry\r\nX-Slow: ")
        .unwrap();
    let got = read_until_closed(&mut c, Duration::from_secs(15));
    // Closed without a response, or with hyper's 408; never a 200 for half a request.
    let text = String::from_utf8_lossy(&got);
    assert!(got.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
    healthy(&server);
}

#[test]
fn an_upload_body_that_stops_fails_and_the_session_can_resume() {
    let data = tempdir();
    let server = server(data.path());
    let (status, headers, _) = http(server.addr, "POST", "/v2/team/app/blobs/uploads/", &[], b"");
    assert_eq!(status, 202);
    let location = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("location"))
        .map(|(_, v)| v.clone())
        .expect("a location");
    let mut c = TcpStream::connect(server.addr).unwrap();
    write!(
        c,
        "PATCH {location} HTTP/1.1\r\nHost: registry\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n"
    )
    .unwrap();
    c.write_all(&[7u8; 1000]).unwrap();
    let got = read_until_closed(&mut c, Duration::from_secs(15));
    let text = String::from_utf8_lossy(&got);
    assert!(
        got.is_empty() || !text.starts_with("HTTP/1.1 2"),
        "a stalled body was accepted: {text}"
    );
    healthy(&server);
    // The blob can still be pushed whole.
    let d = push_blob(&server, "team/app", b"whole blob after a stalled upload");
    let (status, _, body) = http(
        server.addr,
        "GET",
        &format!("/v2/team/app/blobs/{d}"),
        &[],
        b"",
    );
    assert_eq!(
        (status, body.as_slice()),
        (200, &b"whole blob after a stalled upload"[..])
    );
}

#[test]
fn a_response_nobody_reads_is_abandoned() {
    let data = tempdir();
    let server = server(data.path());
    // Larger than every socket buffer on the way, so the server's writes stall.
    let blob: Vec<u8> = (0..64u32 << 20).map(|i| (i % 251) as u8).collect();
    let d = push_blob(&server, "team/app", &blob);
    let mut c = TcpStream::connect(server.addr).unwrap();
    write!(
        c,
        "GET /v2/team/app/blobs/{d} HTTP/1.1\r\nHost: registry\r\n\r\n"
    )
    .unwrap();
    // Read nothing for a while: the server gives up after 1 s of no progress.
    std::thread::sleep(Duration::from_secs(4));
    let got = read_until_closed(&mut c, Duration::from_secs(15));
    assert!(
        got.len() < blob.len(),
        "the whole blob arrived ({} bytes): nothing was abandoned",
        got.len()
    );
    healthy(&server);
}
