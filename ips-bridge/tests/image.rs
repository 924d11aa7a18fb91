//! Writing `var/pkg` for an installed package set taken from a published repository.

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use ips_bridge::{
    CatalogAttrs, CatalogPart, FileRepo, Fmri, ImageError, ImageFilter, ImageMetadata, IniFile,
    Manifest, entry_states, verify_signature,
};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/publish")
}

fn fixture_repo(root: &Path) -> FileRepo {
    let repo = FileRepo::create(root, "example.org").unwrap();
    let now = UNIX_EPOCH + Duration::from_secs(1_704_164_645);
    for (name, proto) in [
        ("base.p5m", None),
        ("hello.p5m", Some(data().join("proto"))),
    ] {
        let text = std::fs::read_to_string(data().join(name)).unwrap();
        repo.publish_at(
            "example.org",
            &Manifest::parse(&text).unwrap(),
            proto.as_deref(),
            now,
        )
        .unwrap();
    }
    repo
}

#[test]
fn writes_var_pkg_for_installed_packages() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_repo(&tmp.path().join("repo"));
    let mut meta = ImageMetadata::new(
        ImageFilter::zone("i386").facet("doc.man", false),
        "20240102T040000.000000Z",
    )
    .publisher("example.org", &["https://pkg.example.org/repo/"]);
    let packages = repo.packages("example.org").unwrap();
    for p in &packages {
        meta = meta.package(p.fmri.clone(), repo.manifest_bytes(p).unwrap());
    }
    let root = tmp.path().join("root");
    meta.write(&root, |fmri, action, out| {
        repo.fetch_payload(fmri, action, out).map(|_| ())
    })
    .unwrap();

    let var_pkg = root.join("var/pkg");
    for d in [
        "cache/index",
        "history",
        "license",
        "lost+found",
        "ssl",
        "state/known",
    ] {
        assert!(var_pkg.join(d).is_dir(), "{d}");
    }
    let ini = IniFile::parse(
        "pkg5.image",
        &std::fs::read_to_string(var_pkg.join("pkg5.image")).unwrap(),
    )
    .unwrap();
    assert_eq!(ini.get("image", "version"), Some("4"));
    assert_eq!(ini.get("variant", "variant.arch"), Some("i386"));
    assert_eq!(
        ini.get("variant", "variant.opensolaris.zone"),
        Some("nonglobal")
    );
    assert_eq!(ini.get("facet", "facet.doc.man"), Some("False"));
    assert_eq!(
        ini.get("property", "publisher-search-order"),
        Some("['example.org']")
    );
    assert_eq!(
        ini.get("authority_example.org", "origins"),
        Some("['https://pkg.example.org/repo/']")
    );

    // The installed catalog: unsigned, every package INSTALLED, manifest SHA-1s kept.
    let installed = var_pkg.join("state/installed");
    let attrs_bytes = std::fs::read(installed.join("catalog.attrs")).unwrap();
    assert!(!verify_signature("catalog.attrs", &attrs_bytes).unwrap());
    let attrs = CatalogAttrs::parse(&attrs_bytes).unwrap();
    assert_eq!(attrs.package_version_count, 2);
    let base = CatalogPart::parse(
        "catalog.base.C",
        &std::fs::read(installed.join("catalog.base.C")).unwrap(),
    )
    .unwrap();
    for (e, p) in base.entries().iter().zip(&packages) {
        assert_eq!(e.fmri().unwrap(), p.fmri);
        assert_eq!(e.signature_sha1(), p.manifest_sha1.as_deref());
        assert!(entry_states(e).contains(&2));
        assert_eq!(
            e.fields["metadata"]["last-install"],
            "20240102T040000.000000Z"
        );
    }
    assert_eq!(
        std::fs::read(installed.join("catalog.base.C")).unwrap(),
        std::fs::read(var_pkg.join("state/known/catalog.base.C")).unwrap()
    );

    // Raw manifests, unfiltered, at q(stem)/q(version).
    for p in &packages {
        let path = var_pkg
            .join("publisher/example.org/pkg")
            .join(p.fmri.dir_path().unwrap());
        assert_eq!(
            std::fs::read(path).unwrap(),
            repo.manifest_bytes(p).unwrap()
        );
    }
    // License text, decompressed, read-only.
    let lic = var_pkg.join("license/demo%2Fhello/license.Example%20License%20%28EL%29");
    assert_eq!(
        std::fs::read(&lic).unwrap(),
        std::fs::read(data().join("proto/LICENSE")).unwrap()
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&lic).unwrap().permissions().mode() & 0o777,
            0o444
        );
    }
}

#[test]
fn rejects_two_versions_of_one_package_and_unpublished_fmris() {
    let tmp = tempfile::tempdir().unwrap();
    let m = b"set name=pkg.fmri value=pkg://p/a@1-1:20240101T000000Z\n".to_vec();
    let a1 = Fmri::parse("pkg://p/a@1-1:20240101T000000Z").unwrap();
    let a2 = Fmri::parse("pkg://p/a@2-1:20240101T000000Z").unwrap();
    let none =
        |_: &Fmri, _: &ips_bridge::Action, _: &mut dyn std::io::Write| Ok::<_, std::io::Error>(());
    let meta = ImageMetadata::new(ImageFilter::zone("i386"), "20240101T000000Z")
        .package(a1, m.clone())
        .package(a2, m.clone());
    match meta.write(tmp.path(), none) {
        Err(ImageError::Package { fmri, message }) => {
            assert!(fmri.contains("a@2"));
            assert!(message.contains("more than one version"));
        }
        r => panic!("{r:?}"),
    }
    let meta = ImageMetadata::new(ImageFilter::zone("i386"), "20240101T000000Z")
        .package(Fmri::parse("a@1").unwrap(), m);
    assert!(matches!(
        meta.write(tmp.path(), none),
        Err(ImageError::Package { .. })
    ));
}

#[test]
fn legacy_pkginfo_like_pkg() {
    let fmri = Fmri::parse("pkg://p/driver/network/e1000g@0.5.11,5.11-2024.0.0.1:20240102T030405Z")
        .unwrap();
    let a = ips_bridge::Action::parse(
        "legacy pkg=SUNWintgige desc=\"Intel(R) PRO/1000 Network Driver\" name=\"Intel(R) PRO/1000\" vendor=\"Oracle Corporation\" category=system,hidden",
    )
    .unwrap();
    let t = UNIX_EPOCH + Duration::from_secs(1_704_164_645); // 2024-01-02 03:04:05 UTC
    let text = ips_bridge::legacy_pkginfo(&a, &fmri, "ignored: name given", "i386", t).unwrap();
    assert_eq!(
        text,
        "ARCH=i386\nBASEDIR=/\nCATEGORY=system,hidden\nDESC=Intel(R) PRO/1000 Network Driver\nNAME=Intel(R) PRO/1000\nPKG=SUNWintgige\nPKGINST=SUNWintgige\nVENDOR=Oracle Corporation\nVERSION=0.5.11,5.11-2024.0.0.1:20240102T030405Z\nINSTDATE=Jan 02 2024 03:04\n"
    );
    // Defaults: the summary names the package.
    let a = ips_bridge::Action::parse("legacy pkg=SUNWcsr").unwrap();
    let text = ips_bridge::legacy_pkginfo(&a, &fmri, "Core Solaris", "i386", t).unwrap();
    assert!(text.contains("NAME=Core Solaris\n") && text.contains("CATEGORY=system\n"));
    assert!(
        ips_bridge::legacy_pkginfo(
            &ips_bridge::Action::parse("dir path=x").unwrap(),
            &fmri,
            "",
            "i386",
            t
        )
        .is_none()
    );
}

/// Every file under `root`, relative path → bytes.
fn tree_of(root: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn write_parsed_writes_what_write_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_repo(&tmp.path().join("repo"));
    let mut meta = ImageMetadata::new(ImageFilter::zone("i386"), "20240102T040000.000000Z");
    let mut parsed = Vec::new();
    for p in &repo.packages("example.org").unwrap() {
        let bytes = repo.manifest_bytes(p).unwrap();
        parsed.push(Manifest::parse(std::str::from_utf8(&bytes).unwrap()).unwrap());
        meta = meta.package(p.fmri.clone(), bytes);
    }
    let license = |fmri: &Fmri, action: &ips_bridge::Action, out: &mut dyn std::io::Write| {
        repo.fetch_payload(fmri, action, out).map(|_| ())
    };
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    meta.write(&a, license).unwrap();
    meta.write_parsed(&b, &parsed.iter().collect::<Vec<_>>(), license)
        .unwrap();
    let (a, b) = (tree_of(&a), tree_of(&b));
    assert!(a.len() > 5, "{:?}", a.keys());
    assert_eq!(a, b);
}
