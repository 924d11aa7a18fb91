//! Our clients find registry credentials where docker and podman keep them: `rdctl build
//! --push`, `rdctl copy` and the worker against `rdctl registry serve` with htpasswd users and
//! an ACL, once with no credentials (refused, naming the 401) and once with a docker
//! `config.json` in `DOCKER_CONFIG`.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use base64::Engine as _;

use crate::util::{Server, rdctl, s, tail, tempdir};
use crate::worker_e2e::{Node, ips_image};

/// A registry where `ci` (password `s3cret`) may pull and push everything and nobody else may
/// do anything.
fn guarded_registry(dir: &Path) -> Server {
    let users = dir.join("htpasswd");
    fs::write(
        &users,
        format!("ci:{}\n", bcrypt::hash("s3cret", 4).unwrap()),
    )
    .unwrap();
    let config = dir.join("registry.toml");
    fs::write(
        &config,
        format!(
            "[auth]\nhtpasswd = \"{}\"\n\n[[auth.acl]]\nsubjects = [\"ci\"]\nrepositories = [\"**\"]\nactions = [\"pull\", \"push\"]\n",
            users.display()
        ),
    )
    .unwrap();
    Server::start(&dir.join("data"), &["--config", s(&config)])
}

/// Runs `cmd` with only `docker_config` as the place credentials may come from.
fn with_config(cmd: &mut Command, home: &Path, docker_config: &Path) -> Output {
    cmd.env("HOME", home)
        .env("DOCKER_CONFIG", docker_config)
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap()
}

#[test]
fn push_copy_and_worker_use_docker_config_credentials() {
    let t = tempdir();
    let dir = t.path();
    let server = guarded_registry(dir);
    let host = server.host();
    let home = dir.join("home");
    let (empty, docker) = (dir.join("no-credentials"), dir.join("docker"));
    for d in [&home, &empty, &docker] {
        fs::create_dir_all(d).unwrap();
    }
    let auth = base64::engine::general_purpose::STANDARD.encode("ci:s3cret");
    fs::write(
        docker.join("config.json"),
        format!("{{\"auths\":{{\"{host}\":{{\"auth\":\"{auth}\"}}}}}}"),
    )
    .unwrap();
    let fail = |what: &str, out: &Output| {
        format!(
            "{what}: {}\nstderr:\n{}\nregistry:\n{}",
            out.status,
            tail(&out.stderr),
            server.log_tail()
        )
    };

    let image = ips_image(dir);
    let reference = format!("{host}/team/app:1.0");
    let build = |out: &str, config: &Path| {
        let mut cmd = rdctl();
        cmd.arg("build")
            .arg(&image)
            .args(["--output", s(&dir.join(out)), "--push", &reference, "-q"])
            .env("SOURCE_DATE_EPOCH", "1700000000");
        with_config(&mut cmd, &home, config)
    };

    // No credentials: the push is refused and the error says why.
    let out = build("out-anon", &empty);
    assert!(!out.status.success(), "{}", fail("anonymous push", &out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("401"), "{stderr}");

    // With the docker config: pushed.
    let out = build("out", &docker);
    assert!(
        out.status.success(),
        "{}",
        fail("push with credentials", &out)
    );

    // rdctl copy reads it back with the same credentials, and not without.
    let pulled = format!("oci:{}:1.0", s(&dir.join("pulled")));
    let out = with_config(rdctl().args(["copy", &reference, &pulled]), &home, &empty);
    assert!(!out.status.success(), "{}", fail("anonymous copy", &out));
    let out = with_config(rdctl().args(["copy", &reference, &pulled]), &home, &docker);
    assert!(
        out.status.success(),
        "{}",
        fail("copy with credentials", &out)
    );

    // The worker provisions a zone from it with the credentials; without, nothing is created.
    // (Two nodes: a failed zone backs off, and the second run must not wait for that.)
    let run = |name: &str, config: &Path| {
        let node = Node::new(&dir.join(name));
        node.zone("app", &reference);
        let out = with_config(
            rdctl().args(["worker", "run", "--once", "--config", s(&node.config())]),
            &home,
            config,
        );
        (node, out)
    };
    let (node, out) = run("node-anon", &empty);
    assert!(!out.status.success(), "{}", fail("anonymous worker", &out));
    assert!(!node.root("app").join("usr/bin/tool").exists());
    let (node, out) = run("node", &docker);
    assert!(
        out.status.success(),
        "{}",
        fail("worker with credentials", &out)
    );
    assert_eq!(
        fs::read(node.root("app").join("usr/bin/tool")).unwrap(),
        b"#!/bin/sh\necho tool\n"
    );
}
