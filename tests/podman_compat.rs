//! podman (Debian's 4.3, the containers/image push and pull path that skopeo and buildah share)
//! against `rdctl registry serve` with the auth setups of `tests/docker_compat.rs` (issue 50):
//! a token service with an anonymous pull rule, Basic auth with one, Basic auth without one.
//!
//! Unlike docker, containers/image sends the password with its login's `GET /v2/` whether or not
//! that asks for one, and answers a 401 challenge on any request: with Basic auth and an
//! anonymous rule podman refuses a wrong password at login, pushes with the right one and pulls
//! `public/**` anonymously (docs/auth.md, "docker", has both columns).
//!
//! Each test runs podman with its own storage (vfs), run root and auth file in a temporary
//! directory, as root with cgroupfs (no systemd), and talks plain HTTP (`--tls-verify=false`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::docker_compat::{motd_rootfs, registry, run, stored};
use crate::util::{s, tail, tempdir};

/// The Debian podman, by path (`scripts/install-deps.sh` installs it).
const PODMAN: &str = "/usr/bin/podman";

/// podman with storage, run root, auth file and events of its own.
struct Podman {
    dir: tempfile::TempDir,
}

impl Podman {
    fn new() -> Podman {
        assert!(
            Path::new(PODMAN).exists(),
            "{PODMAN} is missing: run scripts/install-deps.sh (Debian package podman)"
        );
        let dir = tempdir();
        // `--authfile` names a file that must exist, even before a login.
        std::fs::write(dir.path().join("auth.json"), "{}").unwrap();
        Podman { dir }
    }

    fn auth_file(&self) -> PathBuf {
        self.dir.path().join("auth.json")
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new(PODMAN);
        c.env("REGISTRY_AUTH_FILE", self.auth_file())
            .env("HOME", self.dir.path())
            .env("XDG_RUNTIME_DIR", self.dir.path().join("xdg"))
            .arg("--root")
            .arg(self.dir.path().join("storage"))
            .arg("--runroot")
            .arg(self.dir.path().join("run"))
            .args([
                "--storage-driver",
                "vfs",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
            ]);
        c
    }

    fn podman(&self, args: &[&str]) -> Output {
        let mut c = self.cmd();
        c.args(args);
        run(&mut c, None)
    }

    /// A command that reads or writes credentials, with this podman's auth file.
    fn with_auth(&self, args: &[&str]) -> Output {
        let mut c = self.cmd();
        c.args(&args[..1])
            .arg("--authfile")
            .arg(self.auth_file())
            .args(&args[1..]);
        run(&mut c, None)
    }

    fn ok(&self, args: &[&str]) -> Output {
        let out = self.podman(args);
        assert!(
            out.status.success(),
            "podman {args:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            tail(&out.stdout),
            tail(&out.stderr)
        );
        out
    }

    fn login(&self, registry: &str, user: &str, password: &str) -> Output {
        let mut c = self.cmd();
        c.args([
            "login",
            "--tls-verify=false",
            "-u",
            user,
            "--password-stdin",
            registry,
        ]);
        run(&mut c, Some(&format!("{password}\n")))
    }

    /// A one-layer image (a tar of one file, `podman import`) tagged `reference`; its id.
    fn import(&self, reference: &str, text: &str) -> String {
        let tar = motd_rootfs(self.dir.path(), text);
        self.ok(&["import", s(&tar), reference]);
        self.image_id(reference)
    }

    fn image_id(&self, reference: &str) -> String {
        let out = self.ok(&["image", "inspect", "--format", "{{.Id}}", reference]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn push(&self, reference: &str) -> Output {
        self.with_auth(&["push", "--tls-verify=false", reference])
    }

    fn pull(&self, reference: &str) -> Output {
        self.with_auth(&["pull", "--tls-verify=false", reference])
    }
}

fn succeeded(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed\nstdout:\n{}\nstderr:\n{}",
        tail(&out.stdout),
        tail(&out.stderr)
    );
}

fn refused(out: &Output, what: &str) -> String {
    assert!(
        !out.status.success(),
        "{what} succeeded\nstdout:\n{}",
        tail(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn podman_logs_in_pushes_and_pulls_anonymously_with_token_auth() {
    let dir = tempdir();
    let server = registry(dir.path(), true, true);
    let reg = server.host();
    let podman = Podman::new();
    let team = format!("{reg}/team/app:v1");
    let public = format!("{reg}/public/app:v1");
    let id = podman.import(&team, "pushed by podman\n");
    podman.ok(&["tag", &team, &public]);

    let err = refused(&podman.push(&public), "an anonymous push");
    assert!(
        err.contains("unauthorized") || err.contains("denied") || err.contains("authentication"),
        "{err}"
    );
    let out = podman.login(&reg, "alice", "WRONG");
    refused(&out, "podman login with a wrong password");
    assert!(
        !std::fs::read_to_string(podman.auth_file())
            .unwrap_or_default()
            .contains(&reg)
    );
    succeeded(&podman.login(&reg, "alice", "alice-pw"), "podman login");
    succeeded(&podman.push(&team), "podman push team/app");
    succeeded(&podman.push(&public), "podman push public/app");
    assert!(stored(&server, "team/app", "v1"));
    assert!(stored(&server, "public/app", "v1"));

    succeeded(&podman.with_auth(&["logout", &reg]), "podman logout");
    podman.ok(&["rmi", &team, &public]);
    succeeded(&podman.pull(&public), "an anonymous pull of public/app");
    assert_eq!(podman.image_id(&public), id);
    let err = refused(&podman.pull(&team), "an anonymous pull of team/app");
    assert!(
        err.contains("denied") || err.contains("unauthorized") || err.contains("authentication"),
        "{err}"
    );
    assert!(server.log_shows("token issued"));
}

#[test]
fn podman_with_basic_auth_and_an_anonymous_rule_checks_the_password_pushes_and_pulls_anonymously() {
    let dir = tempdir();
    let server = registry(dir.path(), false, true);
    let reg = server.host();
    let podman = Podman::new();
    let team = format!("{reg}/team/app:v1");
    let public = format!("{reg}/public/app:v1");
    let id = podman.import(&team, "pushed by podman with Basic auth\n");
    podman.ok(&["tag", &team, &public]);

    // The anonymous `/v2/` answers 200, but podman sends the password with it, so a wrong one
    // is refused (docker's login never sends it there).
    refused(
        &podman.login(&reg, "alice", "WRONG"),
        "podman login with a wrong password",
    );
    let err = refused(&podman.push(&team), "an anonymous push");
    assert!(
        err.contains("unauthorized") || err.contains("authentication"),
        "{err}"
    );
    assert!(!stored(&server, "team/app", "v1"));
    // With the right one, the upload's 401 is answered with it.
    succeeded(&podman.login(&reg, "alice", "alice-pw"), "podman login");
    succeeded(&podman.push(&team), "podman push team/app");
    succeeded(&podman.push(&public), "podman push public/app");
    assert!(stored(&server, "team/app", "v1"));

    succeeded(&podman.with_auth(&["logout", &reg]), "podman logout");
    podman.ok(&["rmi", &team, &public]);
    succeeded(&podman.pull(&public), "an anonymous pull of public/app");
    assert_eq!(podman.image_id(&public), id);
    refused(&podman.pull(&team), "an anonymous pull of team/app");
}

#[test]
fn podman_logs_in_pushes_and_pulls_with_basic_auth_without_anonymous_rules() {
    let dir = tempdir();
    let server = registry(dir.path(), false, false);
    let reg = server.host();
    let podman = Podman::new();
    let team = format!("{reg}/team/app:v1");
    let id = podman.import(&team, "pushed by podman, Basic auth only\n");

    refused(
        &podman.login(&reg, "alice", "WRONG"),
        "podman login with a wrong password",
    );
    succeeded(&podman.login(&reg, "alice", "alice-pw"), "podman login");
    succeeded(&podman.push(&team), "podman push");
    assert!(stored(&server, "team/app", "v1"));
    podman.ok(&["rmi", &team]);
    succeeded(&podman.pull(&team), "podman pull");
    assert_eq!(podman.image_id(&team), id);
    succeeded(&podman.with_auth(&["logout", &reg]), "podman logout");
    podman.ok(&["rmi", &team]);
    refused(&podman.pull(&team), "a pull without credentials");
}
