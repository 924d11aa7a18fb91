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

/// The store as a plain-HTTP server opens it with `sendfile_min_size = 0`: every read is made
/// of windows for `sendfile` (unfaulted, registered), which read back the same bytes.
async fn sending_fs_store() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap().send_from_file(Some(0));
    (Arc::new(store), dir)
}

mod sending {
    crate::store_suite!(super::sending_fs_store);
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

/// The filesystem store's staged bytes can be read back before commit (flushed writes, through
/// the production wrapper too): uploads rely on it to verify a non-sha256 digest.
#[tokio::test]
async fn fs_staging_is_readable_before_commit() {
    use registry::storage::Key;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for (store, _dir) in [fs_store().await, instrumented_fs_store().await] {
        assert!(store.staging_readable());
        let k = Key::new("staging/readable").unwrap();
        let mut w = store.writer(&k, None).await.unwrap();
        for (part, want) in [(&b"abc"[..], &b"abc"[..]), (b"def", b"abcdef")] {
            w.write_all(part).await.unwrap();
            w.flush().await.unwrap();
            let (meta, mut r) = store.read(&k, 0).await.unwrap();
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, want);
            assert_eq!(meta.size, want.len() as u64);
        }
        w.cancel().await.unwrap();
    }
}
