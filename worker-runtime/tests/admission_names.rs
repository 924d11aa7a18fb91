//! The admission policy sees one canonical spelling of every image reference: a zone that
//! writes its registry host in upper case, with a trailing dot or with a padded port is held
//! to the `signed` rule written for the lower-case host, even under `default = "accept"`
//! (issue 33: `LOCALHOST:5000/...` was admitted unsigned). Real registry (in-process,
//! loopback port 0), real client, the worker's own reconcile pass.

mod image;
mod tarbuild;

use std::path::PathBuf;
use std::sync::Arc;

use registry::storage::FsStore;
use registry::{AppState, RegistryConfig, router};
use registry_client::{Client, Reference};
use tarbuild::Tar;
use worker_runtime::{Phase, Worker, WorkerConfig, status};

const OS_VERSION: &str = "omnios-r151054";

struct Node {
    t: tempfile::TempDir,
}

impl Node {
    fn new(policy: &str) -> Node {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("zones")).unwrap();
        std::fs::write(
            t.path().join("release.pub"),
            trust::generate().verifying().to_pem(),
        )
        .unwrap();
        std::fs::write(t.path().join("policy.toml"), policy).unwrap();
        std::fs::write(
            t.path().join("worker.toml"),
            format!(
                "zones_dir = \"zones\"\nstate_dir = \"state\"\nworker_id = \"test-node\"\nos_version = \"{OS_VERSION}\"\nbackoff_initial_secs = 30\ngc_grace_secs = 0\nplain_http = true\npolicy = \"policy.toml\"\n[provisioner]\nkind = \"dir\"\nbase = \"roots\"\n"
            ),
        )
        .unwrap();
        Node { t }
    }

    fn config_path(&self) -> PathBuf {
        self.t.path().join("worker.toml")
    }

    fn zone(&self, name: &str, image: &str) {
        std::fs::write(
            self.t.path().join("zones").join(format!("{name}.toml")),
            format!("name = \"{name}\"\nimage = \"{image}\"\npull_policy = \"Always\"\n"),
        )
        .unwrap();
    }

    fn worker(&self) -> Arc<Worker> {
        let cfg = WorkerConfig::load(&self.config_path()).unwrap();
        let client = Client::builder().plain_http(true).build().unwrap();
        Arc::new(Worker::new(cfg).unwrap().with_client(client))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spelling_of_the_host_dodges_a_signed_rule() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = router(AppState::new(Arc::new(store), RegistryConfig::default()));
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let img = image::image(
        vec![image::Layer::new(
            Tar::new().dir("etc").file("etc/motd", b"hi").finish(),
        )],
        &image::Spec {
            os_version: Some(OS_VERSION),
            ..image::Spec::default()
        },
    );
    let c = Client::builder().plain_http(true).build().unwrap();
    for repo in ["apps/web", "other/web"] {
        let r = Reference::parse(&format!("127.0.0.1:{port}/{repo}:1")).unwrap();
        img.push(&c, &r).await;
    }

    // The rule is written in upper case too: it means the same as the lower-case one.
    let node = Node::new(&format!(
        "default = \"accept\"\n\n[[rule]]\nmatch = \"LocalHost:{port}/apps/*\"\naction = \"signed\"\nkeys = [\"release.pub\"]\n"
    ));
    let variants = [
        ("lower", format!("localhost:{port}/apps/web:1")),
        ("upper", format!("LOCALHOST:{port}/apps/web:1")),
        ("mixed", format!("LocalHost:{port}/apps/web:1")),
        ("dot", format!("localhost.:{port}/apps/web:1")),
        ("padded", format!("localhost:0{port}/apps/web:1")),
    ];
    for (zone, image) in &variants {
        node.zone(zone, image);
    }
    // Not under the rule: admitted by the default, so the refusals above are the rule's.
    node.zone("elsewhere", &format!("LOCALHOST:{port}/other/web:1"));

    let w = node.worker();
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["elsewhere"], "{s:?}");
    let rows = status(&node.config_path()).unwrap();
    for (zone, image) in &variants {
        let st = &rows
            .iter()
            .find(|r| r.status.zone == *zone)
            .unwrap_or_else(|| panic!("no status row for {zone}"))
            .status;
        assert_eq!(st.phase, Phase::Denied, "{zone} ({image}): {st:#?}");
        let denial = st.denial.as_ref().unwrap();
        assert_eq!(
            denial.rule.as_deref(),
            Some(format!("rule 1 (match = \"LocalHost:{port}/apps/*\")").as_str()),
            "{zone}: {denial}"
        );
        assert!(
            !node.t.path().join("roots").join(zone).exists(),
            "{zone}: a refused image created a zone"
        );
    }
    task.abort();
}
