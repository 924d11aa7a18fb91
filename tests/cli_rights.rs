//! `rdctl ls HOST` and `rdctl rm` against a registry with users and an ACL (issue 37): the
//! catalog is listed with the stored credential even when anonymous callers may read it, and
//! a refused delete names the delete right, not push.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use base64::Engine as _;

use crate::transfer::umoci_image;
use crate::util::{Server, ok, rdctl, s, tempdir};

/// `ci` (password `s3cret`) may pull and push everything, not delete; anonymous callers may
/// pull `pub/**`.
fn registry(dir: &Path) -> Server {
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
            "[auth]\nhtpasswd = \"{}\"\n\n[[auth.acl]]\nsubjects = [\"ci\"]\nrepositories = [\"**\"]\nactions = [\"pull\", \"push\"]\n\n[[auth.acl]]\nsubjects = [\"anonymous\"]\nrepositories = [\"pub/**\"]\nactions = [\"pull\"]\n",
            users.display()
        ),
    )
    .unwrap();
    Server::start(&dir.join("data"), &["--config", s(&config)])
}

fn as_ci(cmd: &mut Command, docker_config: &Path) -> Output {
    cmd.env("DOCKER_CONFIG", docker_config)
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap()
}

#[test]
fn ls_uses_stored_credentials_and_rm_names_the_delete_right() {
    let t = tempdir();
    let dir = t.path();
    let server = registry(dir);
    let host = server.host();
    let docker = dir.join("docker");
    fs::create_dir_all(&docker).unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode("ci:s3cret");
    fs::write(
        docker.join("config.json"),
        format!("{{\"auths\":{{\"{host}\":{{\"auth\":\"{auth}\"}}}}}}"),
    )
    .unwrap();
    let img = umoci_image(dir, "rights\n");
    let layout = format!("{}:v1", s(&img));
    for repo in ["pub/a", "team/b"] {
        let o = as_ci(
            rdctl().args(["push", &layout, &format!("{host}/{repo}:v1")]),
            &docker,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // Anonymous callers see the public repository only; ci sees both.
    let anonymous = ok(rdctl()
        .args(["ls", &host])
        .env("DOCKER_CONFIG", dir.join("none")));
    let text = String::from_utf8_lossy(&anonymous.stdout);
    assert!(text.contains("pub/a") && !text.contains("team/b"), "{text}");
    let o = as_ci(rdctl().args(["ls", &host]), &docker);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("pub/a") && text.contains("team/b"), "{text}");

    // ci may not delete: the refusal names that right.
    let o = as_ci(rdctl().args(["rm", &format!("{host}/team/b:v1")]), &docker);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("delete in team/b"), "{err}");
    assert!(!err.contains("push to"), "{err}");
    drop(server);
}
