//! A real TCP proxy in front of a registry that injects faults per request: an error status,
//! a connection reset (RST, before the answer or in the middle of the body), a body cut
//! short (clean close before Content-Length bytes), a body held after N bytes until the
//! test releases it, or a body of the right length with every byte wrong. Every request is logged with its method, path, Range header and the
//! body bytes passed on. One request per connection (`Connection: close` both ways), which
//! is all a fault needs.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// What to do with a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer this status with an empty body.
    Status(u16),
    /// Reset the connection after passing this many body bytes (0: before any answer).
    Reset(u64),
    /// Close cleanly after this many body bytes of a longer body.
    Truncate(u64),
    /// Pass this many body bytes, then wait until [`FaultProxy::release`].
    Hold(u64),
    /// Pass the whole body with every byte changed (same length, wrong bytes: a lying
    /// mirror or upstream).
    Corrupt,
}

/// A fault for the requests whose path contains `path`, applied `times` times.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Method (`GET`, `HEAD`) or "" for any.
    pub method: &'static str,
    /// A substring of the request path.
    pub path: String,
    /// How many more requests it applies to (`u32::MAX`: always).
    pub times: u32,
    /// The fault.
    pub fault: Fault,
}

/// One request the proxy saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The `Range` header, if any.
    pub range: Option<String>,
    /// The fault applied, if any.
    pub fault: Option<Fault>,
    /// Body bytes passed to the client.
    pub body_bytes: u64,
}

#[derive(Default)]
struct Shared {
    rules: Vec<Rule>,
    seen: Vec<Seen>,
    released: bool,
}

/// The proxy; its accept thread ends with the test process.
pub struct FaultProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    shared: Arc<(Mutex<Shared>, Condvar)>,
}

impl FaultProxy {
    /// Starts a proxy on 127.0.0.1 (free port) to `upstream`.
    pub fn start(upstream: SocketAddr, rules: Vec<Rule>) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new((
            Mutex::new(Shared {
                rules,
                ..Shared::default()
            }),
            Condvar::new(),
        ));
        let s = shared.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || {
                    let _ = serve(conn, upstream, &s);
                });
            }
        });
        FaultProxy { addr, shared }
    }

    /// `HOST:PORT`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.0.lock().unwrap().seen.clone()
    }

    /// Requests whose path contains `path`.
    pub fn seen_for(&self, path: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.path.contains(path))
            .collect()
    }

    /// Lets held bodies go on (and no later request is held).
    pub fn release(&self) {
        let (m, cv) = &*self.shared;
        m.lock().unwrap().released = true;
        cv.notify_all();
    }

    /// Waits until `f` holds for the log, at most `limit` (a broken condition fails the test
    /// with the log, it never passes by waiting).
    pub fn wait_for(&self, limit: Duration, what: &str, f: impl Fn(&[Seen]) -> bool) {
        let (m, cv) = &*self.shared;
        let mut g = m.lock().unwrap();
        let deadline = std::time::Instant::now() + limit;
        while !f(&g.seen) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(
                !left.is_zero(),
                "timed out waiting for {what}; seen: {:#?}",
                g.seen
            );
            g = cv.wait_timeout(g, left).unwrap().0;
        }
    }
}

fn reset(conn: &TcpStream) {
    // SO_LINGER 0: close() sends RST instead of FIN.
    let _ = rustix::net::sockopt::set_socket_linger(conn, Some(Duration::ZERO));
}

/// Reads up to the end of the head; returns (head, bytes after it).
fn read_head(conn: &mut TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i + 4]).into_owned();
            return Ok((head, buf[i + 4..].to_vec()));
        }
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    shared: &Arc<(Mutex<Shared>, Condvar)>,
) -> std::io::Result<()> {
    let (head, mut body) = read_head(&mut client)?;
    let want = header(&head, "content-length")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    while body.len() < want {
        let mut chunk = vec![0u8; want - body.len()];
        let n = client.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or("").to_owned();
    let path = words.next().unwrap_or("").to_owned();
    let (m, cv) = &**shared;
    let fault = {
        let mut g = m.lock().unwrap();
        let rule = g.rules.iter_mut().find(|r| {
            r.times > 0 && path.contains(&r.path) && (r.method.is_empty() || r.method == method)
        });
        rule.map(|r| {
            r.times = r.times.saturating_sub(1);
            r.fault
        })
    };
    let log = |body_bytes: u64| {
        let mut g = m.lock().unwrap();
        g.seen.push(Seen {
            method: method.clone(),
            path: path.clone(),
            range: header(&head, "range").map(str::to_owned),
            fault,
            body_bytes,
        });
        cv.notify_all();
    };
    match fault {
        Some(Fault::Status(code)) => {
            log(0);
            write!(
                client,
                "HTTP/1.1 {code} Injected\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )?;
            return client.shutdown(Shutdown::Both);
        }
        Some(Fault::Reset(0)) => {
            log(0);
            reset(&client);
            return Ok(());
        }
        _ => {}
    }
    // Forward with Connection: close, then pass the answer on (faults applied to its body).
    let mut up = TcpStream::connect(upstream)?;
    let mut fwd = String::new();
    for (i, line) in head.trim_end().split("\r\n").enumerate() {
        if i > 0 && line.to_ascii_lowercase().starts_with("connection:") {
            continue;
        }
        fwd.push_str(line);
        fwd.push_str("\r\n");
    }
    fwd.push_str("Connection: close\r\n\r\n");
    up.write_all(fwd.as_bytes())?;
    up.write_all(&body)?;
    let (rhead, first) = read_head(&mut up)?;
    let mut rh = String::new();
    for (i, line) in rhead.trim_end().split("\r\n").enumerate() {
        if i > 0 && line.to_ascii_lowercase().starts_with("connection:") {
            continue;
        }
        rh.push_str(line);
        rh.push_str("\r\n");
    }
    rh.push_str("Connection: close\r\n\r\n");
    client.write_all(rh.as_bytes())?;
    let limit = match fault {
        Some(Fault::Reset(n) | Fault::Truncate(n) | Fault::Hold(n)) => n,
        _ => u64::MAX,
    };
    let mut sent = 0u64;
    let mut pending = first;
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        if pending.is_empty() {
            let n = up.read(&mut chunk)?;
            if n == 0 {
                break;
            }
            pending.extend_from_slice(&chunk[..n]);
        }
        let room = usize::try_from(limit - sent).unwrap_or(usize::MAX);
        let n = pending.len().min(room);
        if fault == Some(Fault::Corrupt) {
            for b in &mut pending[..n] {
                *b ^= 0x5a;
            }
        }
        client.write_all(&pending[..n])?;
        sent += n as u64;
        pending.drain(..n);
        if sent == limit {
            client.flush()?;
            match fault {
                Some(Fault::Reset(_)) => {
                    log(sent);
                    reset(&client);
                    return Ok(());
                }
                Some(Fault::Truncate(_)) => {
                    log(sent);
                    return client.shutdown(Shutdown::Both);
                }
                Some(Fault::Hold(_)) => {
                    log(sent);
                    let mut g = m.lock().unwrap();
                    while !g.released {
                        g = cv.wait(g).unwrap();
                    }
                    drop(g);
                    // Released: pass the rest on (to a client that may be long gone).
                    client.write_all(&pending)?;
                    std::io::copy(&mut up, &mut client)?;
                    return Ok(());
                }
                _ => {}
            }
        }
    }
    log(sent);
    client.shutdown(Shutdown::Both)
}
