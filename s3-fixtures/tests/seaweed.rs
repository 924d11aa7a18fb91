//! The SeaweedFS launcher itself: one instance must hold as many test buckets as a test binary
//! creates, each written to.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use s3_fixtures::SeaweedFs;

fn put(addr: std::net::SocketAddr, path: &str, body: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "PUT {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap()
}

/// Each bucket is a SeaweedFS collection that grows its own volumes on first write. With the
/// server's defaults (7 volumes per collection, volume limit from free disk) an 18 GiB disk ran
/// out of volumes after ~38 buckets and every later write failed with 500 InternalError.
#[test]
fn a_hundred_buckets_each_take_a_write() {
    let weed = SeaweedFs::start().unwrap_or_else(|e| panic!("{e}"));
    for i in 0..100 {
        let bucket = weed.bucket().unwrap_or_else(|e| panic!("{e}"));
        let code = put(weed.s3_addr(), &format!("/{bucket}/k"), b"some bytes");
        assert_eq!(
            code,
            200,
            "write to bucket {i} ({bucket}) failed\n{}",
            weed.log_tail()
        );
        assert_eq!(weed.list_keys(&bucket).unwrap(), ["k"]);
    }
}
