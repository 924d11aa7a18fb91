//! Publishing into a file repository and reading it back.

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use ips_bridge::{ActionKind, FileRepo, Fmri, Manifest, RepoError};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/publish")
}

fn manifest(name: &str) -> Manifest {
    Manifest::parse(&std::fs::read_to_string(data().join(name)).unwrap()).unwrap()
}

fn publish_fixtures(root: &Path) -> (FileRepo, Fmri, Fmri) {
    let repo = FileRepo::create(root, "example.org").unwrap();
    let now = UNIX_EPOCH + Duration::from_secs(1_704_164_645);
    let proto = data().join("proto");
    let base = repo
        .publish_at("example.org", &manifest("base.p5m"), None, now)
        .unwrap();
    let hello = repo
        .publish_at("example.org", &manifest("hello.p5m"), Some(&proto), now)
        .unwrap();
    (repo, base, hello)
}

#[test]
fn publish_then_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, base, hello) = publish_fixtures(tmp.path());
    assert_eq!(
        base.to_string(),
        "pkg://example.org/demo/base@1.0,5.11-2024.0.1:20240102T030405Z"
    );
    // A missing timestamp becomes the publication time.
    assert_eq!(
        hello.to_string(),
        "pkg://example.org/demo/hello@1.0,5.11-2024.0.1:20240102T030405Z"
    );

    let repo = FileRepo::open(tmp.path()).unwrap();
    assert_eq!(repo.default_publisher(), Some("example.org"));
    assert_eq!(repo.publishers().unwrap(), ["example.org"]);
    let packages = repo.packages("example.org").unwrap();
    assert_eq!(packages.len(), 2);
    let found = repo.resolve(&Fmri::parse("demo/hello@1").unwrap()).unwrap();
    assert_eq!(found.fmri, hello);
    let m = repo.manifest(&found).unwrap();
    assert_eq!(
        m.attribute("pkg.fmri").unwrap()[0],
        "pkg://example.org/demo/hello@1.0,5.11-2024.0.1:20240102T030405Z"
    );
    // Every payload action got hashes and sizes, and the payloads verify.
    let mut contents = Vec::new();
    for a in m.actions().iter().filter(|a| a.kind().has_payload()) {
        assert_eq!(a.hash().map(str::len), Some(40), "{a}");
        assert!(a.get("chash").is_some() && a.get("pkg.csize").is_some());
        assert_eq!(a.get_all("pkg.content-hash").len(), 2);
        let mut out = Vec::new();
        repo.fetch_payload(&found.fmri, a, &mut out).unwrap();
        contents.push((a.key().unwrap().to_owned(), out));
    }
    let want = |p: &str| std::fs::read(data().join("proto").join(p)).unwrap();
    assert_eq!(contents[0], ("usr/bin/hello".into(), want("usr/bin/hello")));
    assert_eq!(contents[1], ("etc/passwd".into(), want("etc/passwd")));
    assert_eq!(contents[2], ("etc/empty.conf".into(), Vec::new()));
    assert_eq!(
        contents[3],
        ("Example License (EL)".into(), want("LICENSE"))
    );
    // The empty payload is named by the SHA-1 of nothing.
    let empty = m
        .actions()
        .iter()
        .find(|a| a.key() == Some("etc/empty.conf"))
        .unwrap();
    assert_eq!(
        empty.hash(),
        Some("da39a3ee5e6b4b0d3255bfef95601890afd80709")
    );
    assert!(
        tmp.path()
            .join("publisher/example.org/file/da/da39a3ee5e6b4b0d3255bfef95601890afd80709")
            .is_file()
    );
    // Manifests live at q(stem)/q(version).
    assert!(
        tmp.path()
            .join("publisher/example.org/pkg/demo%2Fhello/1.0%2C5.11-2024.0.1%3A20240102T030405Z")
            .is_file()
    );
    // Non-payload actions are kept as written.
    assert_eq!(m.by_kind(ActionKind::Hardlink).count(), 1);
    assert!(repo.verify("example.org").unwrap().is_empty());
}

#[test]
fn republishing_without_proto_reuses_stored_payloads() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, _, hello) = publish_fixtures(tmp.path());
    let pkg = repo.resolve(&hello).unwrap();
    let published = repo.manifest(&pkg).unwrap();
    // Same manifest again, as a new version, with no proto directory.
    let text = published.to_string().replace(
        "1.0,5.11-2024.0.1:20240102T030405Z",
        "1.1,5.11-2024.0.1:20240103T000000Z",
    );
    let again = repo
        .publish("example.org", &Manifest::parse(&text).unwrap(), None)
        .unwrap();
    assert_eq!(again.version().unwrap().release().to_string(), "1.1");
    assert_eq!(repo.packages("example.org").unwrap().len(), 3);
    assert!(repo.verify("example.org").unwrap().is_empty());
    // Invalid actions are refused before anything is written.
    let bad = Manifest::parse(
        "set name=pkg.fmri value=pkg:/demo/bad@1.0-1\ndir path=x mode=0799 owner=root group=bin\n",
    )
    .unwrap();
    let e = repo.publish("example.org", &bad, None).unwrap_err();
    assert!(e.to_string().contains("invalid mode \"0799\""), "{e}");
    assert_eq!(repo.packages("example.org").unwrap().len(), 3);
    // Missing proto files are reported with the package and action.
    let e = repo
        .publish(
            "example.org",
            &manifest("hello.p5m"),
            Some(Path::new("/nonexistent")),
        )
        .unwrap_err();
    assert!(e.to_string().contains("file usr/bin/hello"), "{e}");
}

#[test]
fn corruption_is_reported_naming_package_and_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, _, hello) = publish_fixtures(tmp.path());
    let pkg = repo.resolve(&hello).unwrap();
    let m = repo.manifest(&pkg).unwrap();
    let bin = m
        .actions()
        .iter()
        .find(|a| a.key() == Some("usr/bin/hello"))
        .unwrap();
    let h = bin.hash().unwrap();
    let payload = tmp
        .path()
        .join("publisher/example.org/file")
        .join(&h[..2])
        .join(h);
    // The same content in other gzip bytes (another level: the header's XFL byte differs,
    // the size does not). Reading content does not check the stored bytes' hash, because
    // the content hash decides what is installed and it matches; the repository check
    // still reports the stored file.
    let mut content = Vec::new();
    repo.fetch_payload(&pkg.fmri, bin, &mut content).unwrap();
    let mut recompressed = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut recompressed, &content).unwrap();
    let recompressed = recompressed.finish().unwrap();
    let original = std::fs::read(&payload).unwrap();
    assert_ne!(recompressed, original);
    assert_eq!(
        recompressed.len(),
        original.len(),
        "pkg.csize still matches"
    );
    std::fs::write(&payload, &recompressed).unwrap();
    let mut read = Vec::new();
    repo.fetch_payload(&pkg.fmri, bin, &mut read).unwrap();
    assert_eq!(read, content);
    let problems = repo.verify("example.org").unwrap();
    std::fs::write(&payload, original).unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    match &problems[0] {
        RepoError::Payload { source, .. } => assert!(
            matches!(&**source, ips_bridge::PayloadError::Mismatch { which, .. } if which == "gzip:sha512t_256"),
            "{source}"
        ),
        r => panic!("{r:?}"),
    }
    // Replace the stored payload with another valid gzip file.
    let mut other = Vec::new();
    ips_bridge::compress(&b"not hello"[..], &mut other).unwrap();
    std::fs::write(&payload, &other).unwrap();
    let problems = repo.verify("example.org").unwrap();
    assert_eq!(problems.len(), 1);
    let msg = format!("{}", problems[0]);
    assert!(
        msg.contains("demo/hello") && msg.contains("file usr/bin/hello"),
        "{msg}"
    );
    assert!(matches!(&problems[0], RepoError::Payload { path, .. } if *path == payload));
    // A missing payload.
    std::fs::remove_file(&payload).unwrap();
    assert!(matches!(
        &repo.verify("example.org").unwrap()[0],
        RepoError::PayloadMissing { .. }
    ));
    // A manifest changed behind the catalog's back.
    let mpath = repo.manifest_path(&pkg.fmri).unwrap();
    let text = std::fs::read_to_string(&mpath).unwrap();
    std::fs::write(&mpath, text.replace("Hello, world", "Hello, moon")).unwrap();
    match repo.manifest(&pkg) {
        Err(RepoError::ManifestCorrupt { fmri, path, .. }) => {
            assert!(fmri.contains("demo/hello"));
            assert_eq!(path, mpath);
        }
        r => panic!("{r:?}"),
    }
}

#[test]
fn reader_rejects_non_repositories_and_unknown_publishers() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(matches!(
        FileRepo::open(tmp.path()),
        Err(RepoError::NotARepository { .. })
    ));
    std::fs::write(
        tmp.path().join("pkg5.repository"),
        "[repository]\nversion = 3\n",
    )
    .unwrap();
    assert!(matches!(
        FileRepo::open(tmp.path()),
        Err(RepoError::NotARepository { .. })
    ));
    let tmp = tempfile::tempdir().unwrap();
    let repo = FileRepo::create(tmp.path(), "example.org").unwrap();
    assert!(matches!(
        repo.packages("other.org"),
        Err(RepoError::UnknownPublisher { .. })
    ));
    assert!(repo.packages("example.org").unwrap().is_empty());
}

#[test]
fn concurrent_publishers_lose_no_catalog_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = FileRepo::create(tmp.path(), "example.org").unwrap();
    std::thread::scope(|s| {
        for t in 0..3 {
            let repo = repo.clone();
            s.spawn(move || {
                for i in 0..6 {
                    let text = format!(
                        "set name=pkg.fmri value=pkg:/demo/t{t}@1.{i}-1:20240101T000000Z\ndir path=d{t} group=bin mode=0755 owner=root\n"
                    );
                    repo.publish("example.org", &Manifest::parse(&text).unwrap(), None)
                        .unwrap();
                }
            });
        }
    });
    let reopened = FileRepo::open(tmp.path()).unwrap();
    assert_eq!(reopened.packages("example.org").unwrap().len(), 18);
    assert!(reopened.verify("example.org").unwrap().is_empty());
}

#[test]
fn rebuild_regenerates_the_catalog_from_manifests() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, _, _) = publish_fixtures(tmp.path());
    let before = repo.packages("example.org").unwrap();
    let catalog_dir = tmp.path().join("publisher/example.org/catalog");
    std::fs::remove_dir_all(&catalog_dir).unwrap();
    assert!(repo.packages("example.org").unwrap().is_empty());
    // A stray unparseable manifest is reported, not catalogued.
    let junk = tmp
        .path()
        .join("publisher/example.org/pkg/demo%2Fjunk/1.0%2C5.11-1%3A20240101T000000Z");
    std::fs::create_dir_all(junk.parent().unwrap()).unwrap();
    std::fs::write(&junk, "frob x=y\n").unwrap();
    let problems = repo.rebuild_catalog("example.org").unwrap();
    assert_eq!(problems.len(), 1);
    assert!(
        problems[0].to_string().contains("demo/junk"),
        "{}",
        problems[0]
    );
    let mut after = repo.packages("example.org").unwrap();
    let mut before = before;
    after.sort_by(|a, b| a.fmri.cmp(&b.fmri));
    before.sort_by(|a, b| a.fmri.cmp(&b.fmri));
    assert_eq!(after, before);
    assert!(repo.verify("example.org").unwrap().is_empty());
}

#[test]
fn payload_names_must_be_hex_digests() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = FileRepo::create(tmp.path(), "example.org").unwrap();
    for bad in ["../../etc/passwd", "x", "", "ab/cd"] {
        assert!(repo.payload_path("example.org", bad).is_err(), "{bad:?}");
    }
    let p = repo
        .payload_path("example.org", "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        .unwrap();
    assert!(p.ends_with("publisher/example.org/file/da/da39a3ee5e6b4b0d3255bfef95601890afd80709"));
}

#[test]
fn publish_refuses_what_lint_refuses_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let repo = FileRepo::create(dir.path(), "example.org").unwrap();
    let before = tree(dir.path());
    let cases = [
        // A file with no owner: pkg would make it uid 0 silently.
        (
            "set name=pkg.fmri value=pkg:/demo/a@1.0-1\nfile NOHASH path=x mode=0644 group=bin\n",
            "owner is required (file x) [required-attr]",
        ),
        // No pkg.fmri at all.
        (
            "dir path=x mode=0755 owner=root group=bin\n",
            "[pkg-fmri-missing]",
        ),
        // One path as a directory and as a file.
        (
            "set name=pkg.fmri value=pkg:/demo/c@1.0-1\ndir path=x mode=0755 owner=root group=bin\nfile NOHASH path=x mode=0644 owner=root group=bin\n",
            "line 3, column 1: path x is delivered as a file here and as a dir on line 2 [path-types]",
        ),
    ];
    for (text, want) in cases {
        let m = Manifest::parse(text).unwrap();
        let e = repo
            .publish("example.org", &m, Some(dir.path()))
            .expect_err(text);
        assert!(e.to_string().contains(want), "{e}");
    }
    assert_eq!(tree(dir.path()), before, "nothing written");
}

/// Every path under `root` with its size, sorted.
fn tree(root: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            }
            out.push((e.path(), meta.len()));
        }
    }
    out.sort();
    out
}

/// Every file under `root` is 0644 and every directory 0755, as pkgrepo and pkgsend write
/// them: `pkgrepo info` and pkg.depotd refuse catalog files others cannot read.
#[cfg(unix)]
fn assert_pkg5_modes(root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            let want = if meta.is_dir() { 0o755 } else { 0o644 };
            assert_eq!(mode, want, "{}: mode {mode:o}", path.display());
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
}

#[cfg(unix)]
#[test]
fn published_files_are_0644_and_directories_0755() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    publish_fixtures(&root);
    assert_pkg5_modes(&root);
    let cfg = std::fs::read_to_string(root.join("pkg5.repository")).unwrap();
    // What `pkgrepo create` writes; `pkgrepo verify` checks the directory exists.
    assert!(
        cfg.contains("trust-anchor-directory = /etc/ssl/pkg/\n"),
        "{cfg}"
    );
}

fn catalog_json(root: &Path, name: &str) -> serde_json::Value {
    let path = root.join("publisher/example.org/catalog").join(name);
    serde_json::from_slice(&std::fs::read(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_publication_is_recorded_in_the_update_log_of_its_hour() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let repo = FileRepo::create(root, "example.org").unwrap();
    let proto = data().join("proto");
    let at = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
    // 2024-01-02 03:04:05, 03:30:00 (the same hour), then 05:00:00.
    let base = repo
        .publish_at(
            "example.org",
            &manifest("base.p5m"),
            None,
            at(1_704_164_645),
        )
        .unwrap();
    let attrs = catalog_json(root, "catalog.attrs");
    let base_lm = attrs["parts"]["catalog.dependency.C"]["last-modified"].clone();
    let hello = repo
        .publish_at(
            "example.org",
            &manifest("hello.p5m"),
            Some(&proto),
            at(1_704_166_200),
        )
        .unwrap();
    let attrs = catalog_json(root, "catalog.attrs");
    assert_eq!(
        attrs["updates"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["update.20240102T03Z.C"]
    );
    let log = catalog_json(root, "update.20240102T03Z.C");
    let records = &log["example.org"];
    let base_rec = &records["demo/base"][0];
    assert_eq!(base_rec["op-type"], "add");
    assert_eq!(base_rec["op-time"], "20240102T030405.000000Z");
    assert_eq!(base_rec["version"], base.version().unwrap().to_string());
    // A record holds the package's entry in each part it is in, as the parts hold it.
    let base_part = catalog_json(root, "catalog.base.C");
    assert_eq!(
        base_rec["catalog.base.C"],
        base_part["example.org"]["demo/base"][0]
    );
    assert!(base_rec.get("catalog.dependency.C").is_none(), "{base_rec}");
    let hello_rec = &records["demo/hello"][0];
    assert_eq!(hello_rec["op-time"], "20240102T033000.000000Z");
    assert_eq!(
        hello_rec["catalog.dependency.C"]["actions"][0],
        "depend fmri=pkg:/demo/base@1.0 type=require"
    );
    assert_eq!(attrs["last-modified"], "20240102T033000.000000Z");
    assert_eq!(
        attrs["updates"]["update.20240102T03Z.C"]["last-modified"],
        "20240102T033000.000000Z"
    );
    assert_eq!(
        attrs["updates"]["update.20240102T03Z.C"]["signature-sha-1"],
        log["_SIGNATURE"]["sha-1"]
    );
    // The dependency part changed with hello (it has a depend action), not with base.
    assert_ne!(
        attrs["parts"]["catalog.dependency.C"]["last-modified"],
        base_lm
    );

    // Two hours later: a new log; the first stays listed. Base again (a package without
    // dependency actions): the dependency part keeps the time it last changed, and
    // republishing one FMRI is a remove and an add.
    repo.publish_at(
        "example.org",
        &manifest("base.p5m"),
        None,
        at(1_704_171_600),
    )
    .unwrap();
    let attrs = catalog_json(root, "catalog.attrs");
    let names: Vec<_> = attrs["updates"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["update.20240102T03Z.C", "update.20240102T05Z.C"]);
    assert_eq!(
        attrs["parts"]["catalog.dependency.C"]["last-modified"],
        "20240102T033000.000000Z"
    );
    assert_eq!(
        attrs["parts"]["catalog.base.C"]["last-modified"],
        "20240102T050000.000000Z"
    );
    let log = catalog_json(root, "update.20240102T05Z.C");
    let ops: Vec<_> = log["example.org"]["demo/base"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["op-type"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["remove", "add"]);
    // The catalog still reads, signatures and all.
    assert_eq!(repo.packages("example.org").unwrap().len(), 2);
    let _ = hello;

    // A rebuilt catalog starts over, as pkgrepo rebuild's: no update logs.
    assert!(repo.rebuild_catalog("example.org").unwrap().is_empty());
    let attrs = catalog_json(root, "catalog.attrs");
    assert_eq!(attrs["updates"], serde_json::json!({}));
    let left: Vec<_> = std::fs::read_dir(root.join("publisher/example.org/catalog"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("update."))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `pkgrepo create` leaves `[publisher] prefix` empty and `pkgsend publish` keeps it so.
fn without_prefix(root: &Path) {
    let cfg = root.join("pkg5.repository");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("prefix = example.org", "prefix = ")).unwrap();
}

#[test]
fn a_repository_without_a_default_publisher_uses_its_only_one_and_refuses_to_guess() {
    use ips_bridge::PackageRepository;
    let tmp = tempfile::tempdir().unwrap();
    let (repo, base, _) = publish_fixtures(tmp.path());
    without_prefix(tmp.path());
    let repo = FileRepo::open(repo.root()).unwrap();
    assert_eq!(repo.default_publisher(), None);
    // One publisher: patterns without one find its packages (they listed nothing before).
    assert_eq!(
        PackageRepository::default_publisher(&repo)
            .unwrap()
            .as_deref(),
        Some("example.org")
    );
    assert_eq!(repo.matching(&[]).unwrap().len(), 2);
    let found = repo.find(&Fmri::parse("demo/base").unwrap()).unwrap();
    assert_eq!(found.map(|p| p.fmri), Some(base));
    // Two: an error naming both, never an empty listing.
    let text = "set name=pkg.fmri value=pkg:/other/tool@1-1:20240101T000000Z\n";
    repo.publish("other.org", &Manifest::parse(text).unwrap(), None)
        .unwrap();
    let err = repo.matching(&[]).unwrap_err().to_string();
    assert!(
        err.contains("no default publisher") && err.contains("example.org, other.org"),
        "{err}"
    );
    assert!(repo.find(&Fmri::parse("demo/base").unwrap()).is_err());
    // A publisher in the pattern needs no default.
    let named = Fmri::parse("pkg://other.org/other/tool").unwrap();
    assert_eq!(repo.matching(&[named]).unwrap().len(), 1);
}
