//! A read-only depot server over a file repository (the operations `pkg` needs to list,
//! install and search: versions, catalog, manifest, file, publisher, search 1, status).

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use flate2::Compression;
use flate2::write::GzEncoder;
use tiny_http::{Header, Method, Request, Response, Server, StatusCode};

use super::terminator::{ServerTls, Terminator};
use crate::fmri::{Fmri, unquote};
use crate::repo::FileRepo;

/// The operations and versions the server answers, as sent by `versions/0/`.
pub const VERSIONS: &str = "pkg-server ips-bridge-0.1\nversions 0\ncatalog 1\nmanifest 0\nfile 0 1\npublisher 0 1\nsearch 0 1\nstatus 0\n";

const OPS: [&str; 7] = [
    "versions",
    "catalog",
    "manifest",
    "file",
    "publisher",
    "search",
    "status",
];

/// A running depot server. Stop it with [`DepotServer::shutdown`]; dropping it also stops
/// it.
pub struct DepotServer {
    server: Arc<Server>,
    addr: SocketAddr,
    workers: Vec<JoinHandle<()>>,
    tls: Option<Terminator>,
}

impl DepotServer {
    /// Serves `repo` read-only on `addr` (e.g. `127.0.0.1:0` for any free port) with a few
    /// worker threads.
    pub fn start(repo: FileRepo, addr: &str) -> io::Result<Self> {
        Self::serve(repo, addr, None)
    }

    /// [`DepotServer::start`] over HTTPS with `tls`'s certificate: TLS connections on `addr`
    /// are relayed to the HTTP server, which then listens on loopback only.
    pub fn start_tls(repo: FileRepo, addr: &str, tls: &ServerTls) -> io::Result<Self> {
        Self::serve(repo, addr, Some(tls))
    }

    fn serve(repo: FileRepo, addr: &str, tls: Option<&ServerTls>) -> io::Result<Self> {
        let listen = addr;
        let http_addr = if tls.is_some() { "127.0.0.1:0" } else { listen };
        let server = Server::http(http_addr).map_err(io::Error::other)?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| io::Error::other("not an ip listener"))?;
        let server = Arc::new(server);
        let repo = Arc::new(repo);
        let workers = (0..4)
            .map(|_| {
                let server = Arc::clone(&server);
                let repo = Arc::clone(&repo);
                std::thread::spawn(move || {
                    while let Ok(req) = server.recv() {
                        // A failed response means the client went away; nothing to do.
                        let _ = handle(&repo, req);
                    }
                })
            })
            .collect();
        let mut depot = Self {
            server,
            addr,
            workers,
            tls: None,
        };
        // On failure `depot` is dropped, which stops the workers.
        if let Some(tls) = tls {
            let terminator = Terminator::start(listen, depot.addr, tls)?;
            depot.addr = terminator.local_addr();
            depot.tls = Some(terminator);
        }
        Ok(depot)
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The origin URL, e.g. `http://127.0.0.1:8080/` (`https://` when serving TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}/", self.addr)
    }

    /// Stops accepting requests and waits for the workers to finish.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(mut t) = self.tls.take() {
            t.stop();
        }
        for _ in 0..self.workers.len() {
            self.server.unblock();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Drop for DepotServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("valid header")
}

fn not_found(req: Request, why: &str) -> io::Result<()> {
    req.respond(Response::from_string(format!("{why}\n")).with_status_code(StatusCode(404)))
}

/// Sends a small text document, gzip-encoded when the client accepts it.
fn send_text(req: Request, body: Vec<u8>, content_type: &str) -> io::Result<()> {
    let gzip = req.headers().iter().any(|h| {
        h.field.equiv("Accept-Encoding")
            && h.value
                .as_str()
                .split(',')
                .any(|e| e.trim().split(';').next() == Some("gzip"))
    });
    let mut resp = if gzip {
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(&body)?;
        Response::from_data(enc.finish()?).with_header(header("Content-Encoding", "gzip"))
    } else {
        Response::from_data(body)
    };
    resp = resp
        .with_header(header("Content-Type", content_type))
        .with_header(header(
            "Cache-Control",
            "must-revalidate, no-transform, max-age=31536000",
        ));
    req.respond(resp)
}

fn read_file(path: &std::path::Path) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    File::open(path)?.read_to_end(&mut v)?;
    Ok(v)
}

fn handle(repo: &FileRepo, req: Request) -> io::Result<()> {
    if !matches!(req.method(), Method::Get | Method::Head) {
        return req
            .respond(Response::from_string("read-only depot\n").with_status_code(StatusCode(405)));
    }
    let url = req.url().split('?').next().unwrap_or("").to_owned();
    let segs: Vec<&str> = url.split('/').filter(|s| !s.is_empty()).collect();
    // The first segment is a publisher unless it is an operation name.
    let (publisher, rest) = match segs.first() {
        Some(first) if !OPS.contains(first) => (Some((*first).to_owned()), &segs[1..]),
        _ => (None, &segs[..]),
    };
    let (op, ver, arg) = match rest {
        [op] => (*op, "", ""),
        [op, ver] => (*op, *ver, ""),
        [op, ver, arg] => (*op, *ver, *arg),
        _ => return not_found(req, "unknown operation"),
    };
    if (op, ver) == ("versions", "0") {
        // Whatever the publishers: a client learns what the server speaks first.
        return send_text(
            req,
            VERSIONS.as_bytes().to_vec(),
            "text/plain; charset=utf-8",
        );
    }
    let explicit_publisher = publisher.is_some();
    let publisher =
        match publisher.map_or_else(|| repo.resolved_default_publisher(), |p| Ok(Some(p))) {
            Ok(Some(p)) => p,
            Ok(None) => return not_found(req, "no publisher"),
            Err(e) => return not_found(req, &e.to_string()),
        };
    if !repo.publishers().unwrap_or_default().contains(&publisher) {
        return not_found(req, "unknown publisher");
    }
    match (op, ver) {
        ("catalog", "1") => {
            let Some(name) = unquote(arg).filter(|n| {
                (n.starts_with("catalog.") || n.starts_with("update.")) && !n.contains(['/', '\\'])
            }) else {
                return not_found(req, "no such catalog file");
            };
            match repo.catalog_path(&publisher, &name).and_then(|p| {
                read_file(&p).map_err(|source| crate::repo::RepoError::Io { path: p, source })
            }) {
                Ok(body) => send_text(req, body, "text/plain; charset=utf-8"),
                Err(_) => not_found(req, "no such catalog file"),
            }
        }
        ("manifest", "0") => {
            let fmri = unquote(arg)
                .and_then(|a| Fmri::parse(&a).ok())
                .filter(|f| f.version().is_some_and(|v| v.timestamp().is_some()))
                .and_then(|f| f.with_publisher(Some(&publisher)).ok());
            let body = fmri
                .and_then(|f| repo.manifest_path(&f).ok())
                .and_then(|p| read_file(&p).ok());
            match body {
                Some(b) => send_text(req, b, "text/plain; charset=utf-8"),
                None => not_found(req, "no such manifest"),
            }
        }
        ("file", "0" | "1") => {
            let ok = !arg.is_empty() && arg.bytes().all(|c| c.is_ascii_hexdigit());
            let file = ok
                .then(|| repo.payload_path(&publisher, arg).ok())
                .flatten()
                .and_then(|p| File::open(p).ok());
            match file {
                Some(f) => req.respond(
                    Response::from_file(f).with_header(header("Content-Type", "application/data")),
                ),
                None => not_found(req, "no such file"),
            }
        }
        ("publisher", v @ ("0" | "1")) => {
            // `publisher/1` without a publisher lists them all.
            let names = if v == "1" && !explicit_publisher {
                repo.publishers().unwrap_or_default()
            } else {
                vec![publisher]
            };
            let publishers: Vec<serde_json::Value> = names
                .into_iter()
                .map(|name| {
                    serde_json::json!({
                        "alias": null,
                        "name": name,
                        "packages": [],
                        "repositories": [],
                    })
                })
                .collect();
            let p5i = serde_json::json!({
                "packages": [],
                "publishers": publishers,
                "version": 1,
            });
            send_text(
                req,
                crate::catalog::to_catalog_json(&p5i).into_bytes(),
                "application/vnd.pkg5.info",
            )
        }
        ("search", v @ ("0" | "1")) => answer_search(repo, &publisher, v, arg, req),
        ("status", "0") => answer_status(repo, req),
        _ => not_found(req, "operation not supported"),
    }
}

/// `search/0/TOKEN` and `search/1/QUERY` (see [`super::search`]).
fn answer_search(
    repo: &FileRepo,
    publisher: &str,
    version: &str,
    arg: &str,
    req: Request,
) -> io::Result<()> {
    use super::search::{SearchError, search_v0, search_v1};
    let text = |body: String| {
        Response::from_data(body.into_bytes())
            .with_header(header("Content-Type", "text/plain; charset=utf-8"))
    };
    let query = unquote(arg).unwrap_or_default();
    let answer = if query.is_empty() {
        // pkg.depotd answers a missing query with 400 (search/1) or 500 (search/0).
        return req.respond(
            Response::from_string(format!("search/{version}/ needs a query\n"))
                .with_status_code(StatusCode(400)),
        );
    } else if version == "0" {
        // An old client's search: every match, an empty body for none.
        search_v0(repo, publisher, &query).map(Some)
    } else {
        search_v1(repo, publisher, &query)
    };
    match answer {
        Ok(Some(body)) => req.respond(text(body)),
        // No match: 204, so pkg tells "no results" from "search unavailable".
        Ok(None) => req.respond(Response::empty(StatusCode(204))),
        Err(e @ SearchError::Query(_)) => {
            req.respond(Response::from_string(format!("{e}\n")).with_status_code(StatusCode(400)))
        }
        Err(e) => not_found(req, &e.to_string()),
    }
}

/// `status/0`: each publisher's package counts and last catalog update.
fn answer_status(repo: &FileRepo, req: Request) -> io::Result<()> {
    let mut pubs = serde_json::Map::new();
    for p in repo.publishers().unwrap_or_default() {
        let catalog = repo.catalog(&p).unwrap_or_default();
        let (stems, versions) = catalog.base.counts();
        let updated = repo
            .catalog_path(&p, "catalog.attrs")
            .ok()
            .and_then(|path| read_file(&path).ok())
            .and_then(|b| crate::catalog::CatalogAttrs::parse(&b).ok())
            .map(|a| a.last_modified);
        pubs.insert(
            p,
            serde_json::json!({
                "last-catalog-update": updated,
                "package-count": stems,
                "package-version-count": versions,
                "status": "online",
            }),
        );
    }
    let doc = serde_json::json!({
        "repository": {"publishers": pubs, "status": "online", "version": 4},
        "version": 1,
    });
    send_text(
        req,
        crate::catalog::to_catalog_json(&doc).into_bytes(),
        "application/json",
    )
}
