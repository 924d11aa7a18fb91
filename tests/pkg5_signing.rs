//! Packages signed with the real `pkgsign` (issue 48), built under the image file's
//! `[signatures]` policy, with the real `pkg` client under the same policy as the referee.
//!
//! `openssl` makes a root CA, an intermediate CA and a signing certificate, and a second root
//! with the same name that signs nothing here; `pkgrepo create` + `pkgsend publish` make
//! `demo/signed` and `demo/plain`; `pkgsign -k -c -i` signs `demo/signed`. The real
//! `pkg.depotd` serves the repository (certificates travel through its `file/1` route).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::pkg5_interop::{RealDepot, pkg, pkg5_bin, run, tool, write};
use crate::util::{ok, rdctl, s, tempdir};

/// Extensions for the test CA (`openssl x509 -extfile`).
const EXTENSIONS: &str = "[ca]\nbasicConstraints = critical,CA:true\n\
    keyUsage = critical,keyCertSign,cRLSign\n\
    [intermediate]\nbasicConstraints = critical,CA:true,pathlen:0\n\
    keyUsage = critical,keyCertSign,cRLSign\n\
    [signer]\nbasicConstraints = critical,CA:false\nkeyUsage = critical,digitalSignature\n";

fn openssl(dir: &Path, args: &[&str]) {
    ok(Command::new("openssl").current_dir(dir).args(args));
}

/// `name.key` and a certificate `name.pem` for `cn` with the extensions of `section`:
/// self-signed when `issuer` is `None`, else issued by `issuer.pem`/`issuer.key`.
fn certificate(dir: &Path, name: &str, cn: &str, issuer: Option<&str>, section: &str) {
    let (key, pem, csr) = (
        format!("{name}.key"),
        format!("{name}.pem"),
        format!("{name}.csr"),
    );
    let subj = format!("/CN={cn}");
    openssl(
        dir,
        &[
            "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj",
            &subj,
        ],
    );
    let mut args: Vec<String> = ["x509", "-req", "-in", &csr, "-out", &pem, "-days", "36500"]
        .map(String::from)
        .to_vec();
    match issuer {
        None => args.extend(["-signkey".into(), key.clone()]),
        Some(i) => args.extend([
            "-CA".into(),
            format!("{i}.pem"),
            "-CAkey".into(),
            format!("{i}.key"),
            "-CAcreateserial".into(),
        ]),
    }
    args.extend([
        "-extfile".into(),
        "ext.cnf".into(),
        "-extensions".into(),
        section.into(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    openssl(dir, &args);
}

/// The CA files, the signed repository and a directory trusting the right root.
struct Signed {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    repo: PathBuf,
}

impl Signed {
    fn new(bin: &Path) -> Signed {
        let tmp = tempdir();
        let dir = tmp.path().to_path_buf();
        let ca = dir.join("ca");
        write(&ca.join("ext.cnf"), EXTENSIONS);
        certificate(&ca, "root", "Demo Root CA", None, "ca");
        certificate(&ca, "other", "Demo Root CA", None, "ca");
        certificate(
            &ca,
            "intermediate",
            "Demo Signing CA",
            Some("root"),
            "intermediate",
        );
        certificate(
            &ca,
            "signer",
            "Demo Publisher",
            Some("intermediate"),
            "signer",
        );
        for (trust, root) in [("trusted", "root"), ("untrusted", "other")] {
            fs::create_dir(dir.join(trust)).unwrap();
            fs::copy(
                ca.join(format!("{root}.pem")),
                dir.join(trust).join("ca.pem"),
            )
            .unwrap();
        }

        let proto = dir.join("proto");
        write(&proto.join("usr/bin/hi"), "#!/bin/sh\necho hi\n");
        let repo = dir.join("repo");
        ok(tool(bin, "pkgrepo").args(["create", s(&repo)]));
        ok(tool(bin, "pkgrepo").args(["add-publisher", "-s", s(&repo), "example.org"]));
        for (stem, path) in [("signed", "usr/bin/hi"), ("plain", "usr/bin/hi-plain")] {
            let manifest = dir.join(format!("{stem}.p5m"));
            fs::copy(proto.join("usr/bin/hi"), proto.join(path)).unwrap();
            write(
                &manifest,
                &format!(
                    "set name=pkg.fmri value=pkg:/demo/{stem}@1.0-1\n\
                     set name=pkg.summary value=\"A {stem} package\"\n\
                     dir path=usr owner=root group=sys mode=0755\n\
                     dir path=usr/bin owner=root group=bin mode=0755\n\
                     file path={path} owner=root group=bin mode=0555\n"
                ),
            );
            ok(tool(bin, "pkgsend").args([
                "publish",
                "-s",
                s(&repo),
                "-d",
                s(&proto),
                s(&manifest),
            ]));
        }
        ok(tool(bin, "pkgsign").args([
            "-s",
            s(&repo),
            "-k",
            s(&ca.join("signer.key")),
            "-c",
            s(&ca.join("signer.pem")),
            "-i",
            s(&ca.join("intermediate.pem")),
            "demo/signed",
        ]));
        Signed {
            _tmp: tmp,
            dir,
            repo,
        }
    }

    /// An image file for `package` from `origin` under `policy`, trusting `trust`.
    fn image(&self, name: &str, origin: &str, package: &str, policy: &str, trust: &str) -> PathBuf {
        let path = self.dir.join(format!("{name}.toml"));
        write(
            &path,
            &format!(
                "[publishers]\n\"example.org\" = \"{origin}\"\n\n[packages]\n\
                 include = [\"{package}\"]\n\n[signatures]\npolicy = \"{policy}\"\n\
                 trust_anchors = \"{trust}\"\n"
            ),
        );
        path
    }

    /// The manifest file of `demo/<stem>` in the repository.
    fn manifest_path(&self, stem: &str) -> PathBuf {
        let dir = self
            .repo
            .join(format!("publisher/example.org/pkg/demo%2F{stem}"));
        fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path()
    }

    /// What the real `pkg` says about installing `package` from `origin` with
    /// `signature-policy require-signatures` and `ca` (a PEM file) approved for the publisher.
    fn pkg_install(
        &self,
        bin: &Path,
        name: &str,
        origin: &str,
        ca: &str,
        package: &str,
    ) -> (i32, String) {
        let image = self.dir.join(name);
        let origin = format!("example.org={origin}");
        ok(tool(bin, "pkg").args(["image-create", "--user", "-p", &origin, s(&image)]));
        ok(pkg(bin, &image).args(["set-property", "signature-policy", "require-signatures"]));
        let ca = self.dir.join("ca").join(ca);
        ok(pkg(bin, &image).args(["set-publisher", "--approve-ca-cert", s(&ca), "example.org"]));
        let (code, stdout, stderr) = run(pkg(bin, &image).args(["install", package]));
        (code, format!("{stdout}\n{stderr}"))
    }
}

/// `rdctl lock` of `image`: the exit code and stderr.
fn lock(image: &Path) -> (i32, String) {
    let (code, _, stderr) = run(rdctl().args(["lock", s(image)]));
    (code, stderr)
}

#[test]
fn rdctl_builds_what_pkgsign_signed_and_refuses_what_pkg_refuses() {
    let Some(bin) = pkg5_bin() else { return };
    let f = Signed::new(&bin);
    let depot = RealDepot::start(&bin, &f.repo, &f.dir);

    // Signed and trusted: lock and build under require-signatures.
    let image = f.image(
        "signed",
        &depot.url,
        "demo/signed",
        "require-signatures",
        "trusted",
    );
    let (code, stderr) = lock(&image);
    assert_eq!(code, 0, "{stderr}\ndepot log:\n{}", depot.log());
    let out = f.dir.join("out");
    let (code, stdout, stderr) = run(rdctl().args(["build", s(&image), "--output", s(&out)]));
    assert_eq!(code, 0, "{stdout}\n{stderr}\ndepot log:\n{}", depot.log());
    // The real pkg agrees.
    let (code, said) = f.pkg_install(&bin, "img-signed", &depot.url, "root.pem", "demo/signed");
    assert_eq!(code, 0, "pkg refused what rdctl built:\n{said}");

    // Unsigned: refused by name, and pkg refuses it too; `verify` lets it through.
    let plain = f.image(
        "plain",
        &depot.url,
        "demo/plain",
        "require-signatures",
        "trusted",
    );
    let (code, stderr) = lock(&plain);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("package pkg://example.org/demo/plain@1.0,5.11-1:")
            && stderr.contains("refused by signature policy require-signatures")
            && stderr.contains("not signed: no signature action"),
        "{stderr}"
    );
    let (code, said) = f.pkg_install(&bin, "img-plain", &depot.url, "root.pem", "demo/plain");
    assert_ne!(
        code, 0,
        "pkg installed an unsigned package under require-signatures:\n{said}"
    );
    let plain = f.image(
        "plain-verify",
        &depot.url,
        "demo/plain",
        "verify",
        "trusted",
    );
    assert_eq!(lock(&plain).0, 0);

    // A root with the same name but another key: the chain does not reach a trust anchor.
    let untrusted = f.image(
        "untrusted",
        &depot.url,
        "demo/signed",
        "verify",
        "untrusted",
    );
    let (code, stderr) = lock(&untrusted);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("refused by signature policy verify")
            && stderr.contains(
                "certificate CN=Demo Signing CA: its issuer CN=Demo Root CA is neither a trust \
                 anchor in"
            ),
        "{stderr}"
    );
    let (code, said) = f.pkg_install(
        &bin,
        "img-untrusted",
        &depot.url,
        "other.pem",
        "demo/signed",
    );
    assert_ne!(
        code, 0,
        "pkg installed a package signed under an untrusted root:\n{said}"
    );

    // The lockfile made while trusted no longer builds once the anchors change.
    fs::copy(f.dir.join("untrusted/ca.pem"), f.dir.join("trusted/ca.pem")).unwrap();
    let (code, _, stderr) = run(rdctl().args(["build", s(&image), "--output", s(&out)]));
    assert_ne!(code, 0);
    assert!(stderr.contains("is neither a trust anchor"), "{stderr}");
    fs::copy(f.dir.join("ca/root.pem"), f.dir.join("trusted/ca.pem")).unwrap();
    drop(depot);

    // A manifest changed in the repository after signing, the catalog rebuilt to match it:
    // the file repository serves it consistently, and the signature is what catches it.
    let manifest = f.manifest_path("signed");
    let text = fs::read_to_string(&manifest).unwrap();
    fs::write(&manifest, text.replace("mode=0555", "mode=4555")).unwrap();
    ok(tool(&bin, "pkgrepo").args(["rebuild", "-s", s(&f.repo)]));
    let tampered = f.image(
        "tampered",
        s(&f.repo),
        "demo/signed",
        "require-signatures",
        "trusted",
    );
    let (code, stderr) = lock(&tampered);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("package pkg://example.org/demo/signed@1.0,5.11-1:")
            && stderr.contains(
                "signature by CN=Demo Publisher (rsa-sha256) does not match the manifest"
            ),
        "{stderr}"
    );
    let file_origin = format!("file://{}", f.repo.display());
    let (code, said) = f.pkg_install(
        &bin,
        "img-tampered",
        &file_origin,
        "root.pem",
        "demo/signed",
    );
    assert_ne!(code, 0, "pkg installed a tampered package:\n{said}");
}
