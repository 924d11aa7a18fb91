//! The shared store suite against the filesystem store.

mod conformance;

use std::sync::Arc;

use registry::storage::{FsStore, Store};

async fn fs_store() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    (Arc::new(store), dir)
}

store_suite!(fs_store);

/// The same store behind the production wrapper (metrics and tracing).
async fn instrumented_fs_store() -> (Arc<dyn Store>, tempfile::TempDir) {
    let (inner, dir) = fs_store().await;
    let metrics = Arc::new(registry::metrics::Metrics::default());
    let wrapped: Arc<dyn Store> = Arc::new(registry::storage::Instrumented::new(inner, metrics));
    (wrapped, dir)
}

mod instrumented {
    crate::store_suite!(super::instrumented_fs_store);
}

#[tokio::test]
async fn fs_store_leaves_no_temporary_files() {
    use bytes::Bytes;
    use registry::storage::{Key, PutMode};
    let (store, dir) = fs_store().await;
    let k = Key::new("docs/x").unwrap();
    store
        .put(&k, Bytes::from_static(b"1"), PutMode::Create)
        .await
        .unwrap();
    store.delete(&k).await.unwrap();
    let tmp: Vec<_> = std::fs::read_dir(dir.path().join(".tmp"))
        .unwrap()
        .collect();
    assert!(tmp.is_empty(), "{tmp:?}");
    assert!(
        !dir.path().join("docs").exists(),
        "empty directories are pruned"
    );
}
