//! The behaviour every [`Store`] must show. One async function per case, each taking a fresh
//! store; [`store_suite!`] generates one named test per case for a store factory, so a new store
//! (S3 on SeaweedFS next) runs exactly these cases from its own test file. Every case checks
//! that it leaves the store empty.

use std::sync::Arc;

use bytes::Bytes;
use registry::storage::{ErrorKind, Key, PutMode, Store, StoreError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Generates one `#[tokio::test]` per suite case for `$factory`, an async fn returning a
/// `(Arc<dyn Store>, guard)` pair (the guard keeps temporary resources alive).
#[macro_export]
macro_rules! store_suite {
    ($factory:path) => {
        $crate::store_suite!(@cases $factory;
            documents_round_trip,
            create_is_exclusive,
            replace_needs_the_current_etag,
            get_if_changed_reads_only_a_new_version,
            overwrite_always_writes,
            get_respects_the_limit,
            concurrent_creates_have_one_winner,
            concurrent_replaces_lose_no_update,
            zero_length_blob,
            staged_bytes_are_invisible_until_commit,
            suspend_and_resume_continue_the_stream,
            resume_cuts_back_to_the_recorded_offset,
            resume_right_after_a_dropped_writer,
            resume_past_the_staged_bytes_fails,
            resume_of_a_missing_staging_area_is_not_found,
            a_busy_staging_area_refuses_a_second_writer,
            commit_never_overwrites,
            cancel_removes_the_staging_area,
            read_from_offsets,
            large_stream,
            chunked_reads,
            readers_never_see_partial_documents,
            list_by_prefix,
            list_in_pages,
            delete_and_missing_keys,
            invalid_keys_are_refused,
        );
    };
    (@cases $factory:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let (store, _guard) = $factory().await;
                $crate::conformance::$case(store.clone()).await;
                $crate::conformance::assert_empty(&*store).await;
            }
        )*
    };
}

fn key(s: &str) -> Key {
    Key::new(s).unwrap()
}

fn kind<T: std::fmt::Debug>(r: Result<T, StoreError>) -> ErrorKind {
    r.expect_err("expected an error").kind()
}

/// Fails the test if anything is left in the store.
pub async fn assert_empty(store: &dyn Store) {
    for prefix in ["a", "blobs", "docs", "staging", "big", "list", "race"] {
        let left = store.list(&key(prefix)).await.unwrap();
        assert!(left.is_empty(), "case left {left:?} behind");
    }
}

async fn read_all(store: &dyn Store, k: &Key, offset: u64) -> Vec<u8> {
    let (_, mut r) = store.read(k, offset).await.unwrap();
    let mut out = Vec::new();
    r.read_to_end(&mut out).await.unwrap();
    out
}

pub async fn documents_round_trip(store: Arc<dyn Store>) {
    let k = key("docs/one");
    let etag = store
        .put(&k, Bytes::from_static(b"hello"), PutMode::Create)
        .await
        .unwrap();
    let doc = store.get(&k, 1024).await.unwrap();
    assert_eq!(&doc.bytes[..], b"hello");
    assert_eq!(doc.etag, etag);
    assert_eq!(store.stat(&k).await.unwrap().size, 5);
    store.delete(&k).await.unwrap();
}

pub async fn create_is_exclusive(store: Arc<dyn Store>) {
    let k = key("docs/c");
    store
        .put(&k, Bytes::from_static(b"1"), PutMode::Create)
        .await
        .unwrap();
    let r = store
        .put(&k, Bytes::from_static(b"2"), PutMode::Create)
        .await;
    assert_eq!(kind(r), ErrorKind::AlreadyExists);
    assert_eq!(&store.get(&k, 10).await.unwrap().bytes[..], b"1");
    store.delete(&k).await.unwrap();
}

pub async fn replace_needs_the_current_etag(store: Arc<dyn Store>) {
    let k = key("docs/r");
    let e1 = store
        .put(&k, Bytes::from_static(b"v1"), PutMode::Create)
        .await
        .unwrap();
    let e2 = store
        .put(&k, Bytes::from_static(b"v2"), PutMode::Replace(e1.clone()))
        .await
        .unwrap();
    assert_ne!(e1, e2);
    let stale = store
        .put(&k, Bytes::from_static(b"v3"), PutMode::Replace(e1))
        .await;
    assert_eq!(kind(stale), ErrorKind::PreconditionFailed);
    assert_eq!(&store.get(&k, 10).await.unwrap().bytes[..], b"v2");
    store.delete(&k).await.unwrap();
    let gone = store
        .put(&k, Bytes::from_static(b"v4"), PutMode::Replace(e2))
        .await;
    assert_eq!(kind(gone), ErrorKind::PreconditionFailed);
    assert_eq!(kind(store.stat(&k).await), ErrorKind::NotFound);
}

pub async fn get_if_changed_reads_only_a_new_version(store: Arc<dyn Store>) {
    let k = key("docs/c");
    let e1 = store
        .put(&k, Bytes::from_static(b"v1"), PutMode::Create)
        .await
        .unwrap();
    let first = store.get(&k, 10).await.unwrap();
    assert_eq!(first.etag, e1);
    assert!(store.get_if_changed(&k, 10, &e1).await.unwrap().is_none());
    // Another writer (another replica) replaces it: the next read returns the new version.
    let e2 = store
        .put(&k, Bytes::from_static(b"v2"), PutMode::Replace(e1.clone()))
        .await
        .unwrap();
    let changed = store.get_if_changed(&k, 10, &e1).await.unwrap().unwrap();
    assert_eq!((&changed.bytes[..], &changed.etag), (&b"v2"[..], &e2));
    assert!(store.get_if_changed(&k, 10, &e2).await.unwrap().is_none());
    // The limit holds for a changed document, and a deleted one is not found.
    let e3 = store
        .put(
            &k,
            Bytes::from_static(b"longer than ten"),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    assert_eq!(
        kind(store.get_if_changed(&k, 10, &e2).await),
        ErrorKind::TooLarge
    );
    assert!(store.get_if_changed(&k, 100, &e3).await.unwrap().is_none());
    store.delete(&k).await.unwrap();
    assert_eq!(
        kind(store.get_if_changed(&k, 10, &e3).await),
        ErrorKind::NotFound
    );

    // Large documents (the filesystem store answers these from a `stat` when unchanged), each
    // version as large as the last, replaced back and forth.
    let big = |c: u8| Bytes::from(vec![c; 64 << 10]);
    let k = key("docs/big");
    let mut known = store.put(&k, big(b'a'), PutMode::Create).await.unwrap();
    for c in [b'b', b'a', b'c'] {
        assert!(
            store
                .get_if_changed(&k, 1 << 20, &known)
                .await
                .unwrap()
                .is_none()
        );
        let next = store
            .put(&k, big(c), PutMode::Replace(known.clone()))
            .await
            .unwrap();
        let doc = store.get_if_changed(&k, 1 << 20, &known).await.unwrap();
        let doc = doc.unwrap_or_else(|| panic!("version {} read as unchanged", c as char));
        assert_eq!((doc.bytes, &doc.etag), (big(c), &next));
        known = next;
    }
    store.delete(&k).await.unwrap();
    assert_eq!(
        kind(store.get_if_changed(&k, 1 << 20, &known).await),
        ErrorKind::NotFound
    );
}

pub async fn overwrite_always_writes(store: Arc<dyn Store>) {
    let k = key("docs/o");
    for v in [&b"a"[..], b"bb", b""] {
        store
            .put(&k, Bytes::copy_from_slice(v), PutMode::Overwrite)
            .await
            .unwrap();
        assert_eq!(&store.get(&k, 10).await.unwrap().bytes[..], v);
    }
    store.delete(&k).await.unwrap();
}

pub async fn get_respects_the_limit(store: Arc<dyn Store>) {
    let k = key("docs/big");
    store
        .put(&k, Bytes::from(vec![7u8; 100]), PutMode::Create)
        .await
        .unwrap();
    assert_eq!(store.get(&k, 100).await.unwrap().bytes.len(), 100);
    assert_eq!(kind(store.get(&k, 99).await), ErrorKind::TooLarge);
    store.delete(&k).await.unwrap();
}

pub async fn concurrent_creates_have_one_winner(store: Arc<dyn Store>) {
    let k = key("race/create");
    let tasks: Vec<_> = (0..16u8)
        .map(|i| {
            let store = store.clone();
            let k = k.clone();
            tokio::spawn(async move {
                store
                    .put(&k, Bytes::from(vec![i; 64]), PutMode::Create)
                    .await
            })
        })
        .collect();
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => wins += 1,
            Err(e) => assert_eq!(e.kind(), ErrorKind::AlreadyExists),
        }
    }
    assert_eq!(wins, 1);
    let doc = store.get(&k, 100).await.unwrap();
    assert!(
        doc.bytes.iter().all(|&b| b == doc.bytes[0]),
        "torn document"
    );
    store.delete(&k).await.unwrap();
}

pub async fn concurrent_replaces_lose_no_update(store: Arc<dyn Store>) {
    let k = key("race/counter");
    store
        .put(&k, Bytes::from_static(b"0"), PutMode::Create)
        .await
        .unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            let k = k.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    loop {
                        let doc = store.get(&k, 100).await.unwrap();
                        let n: u64 = std::str::from_utf8(&doc.bytes).unwrap().parse().unwrap();
                        let next = Bytes::from((n + 1).to_string());
                        match store.put(&k, next, PutMode::Replace(doc.etag)).await {
                            Ok(_) => break,
                            Err(e) => assert_eq!(e.kind(), ErrorKind::PreconditionFailed),
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(&store.get(&k, 100).await.unwrap().bytes[..], b"80");
    store.delete(&k).await.unwrap();
}

pub async fn zero_length_blob(store: Arc<dyn Store>) {
    let staging = key("staging/zero");
    let w = store.writer(&staging, None).await.unwrap();
    assert_eq!(w.size(), 0);
    let dest = key("blobs/zero");
    let meta = w.commit(dest.clone()).await.unwrap();
    assert_eq!(meta.size, 0);
    assert!(read_all(&*store, &dest, 0).await.is_empty());
    assert_eq!(kind(store.stat(&staging).await), ErrorKind::NotFound);
    store.delete(&dest).await.unwrap();
}

pub async fn staged_bytes_are_invisible_until_commit(store: Arc<dyn Store>) {
    let staging = key("staging/s1");
    let dest = key("blobs/s1");
    let mut w = store.writer(&staging, None).await.unwrap();
    w.write_all(b"partial").await.unwrap();
    w.flush().await.unwrap();
    assert_eq!(kind(store.stat(&dest).await), ErrorKind::NotFound);
    assert_eq!(
        kind(store.read(&dest, 0).await.map(|_| ())),
        ErrorKind::NotFound
    );
    w.commit(dest.clone()).await.unwrap();
    assert_eq!(read_all(&*store, &dest, 0).await, b"partial");
    store.delete(&dest).await.unwrap();
}

pub async fn suspend_and_resume_continue_the_stream(store: Arc<dyn Store>) {
    let staging = key("staging/s2");
    let mut w = store.writer(&staging, None).await.unwrap();
    w.write_all(b"abc").await.unwrap();
    assert_eq!(w.suspend().await.unwrap(), 3);
    let mut w = store.writer(&staging, Some(3)).await.unwrap();
    assert_eq!(w.size(), 3);
    w.write_all(b"def").await.unwrap();
    assert_eq!(w.size(), 6);
    let dest = key("blobs/s2");
    assert_eq!(w.commit(dest.clone()).await.unwrap().size, 6);
    assert_eq!(read_all(&*store, &dest, 0).await, b"abcdef");
    store.delete(&dest).await.unwrap();
}

pub async fn resume_cuts_back_to_the_recorded_offset(store: Arc<dyn Store>) {
    let staging = key("staging/s3");
    let mut w = store.writer(&staging, None).await.unwrap();
    w.write_all(b"keep").await.unwrap();
    w.suspend().await.unwrap();
    // A request that died after writing but before its offset was recorded.
    let mut w = store.writer(&staging, Some(4)).await.unwrap();
    w.write_all(b"-lost-bytes").await.unwrap();
    drop(w);
    let mut w = store.writer(&staging, Some(4)).await.unwrap();
    w.write_all(b"+ok").await.unwrap();
    let dest = key("blobs/s3");
    w.commit(dest.clone()).await.unwrap();
    assert_eq!(read_all(&*store, &dest, 0).await, b"keep+ok");
    store.delete(&dest).await.unwrap();
}

/// A request cut off mid-write drops its writer, and the client's retry reopens the staging
/// area at once: the store must not refuse it as busy while the dropped writer's last write is
/// still settling (CI once saw the filesystem store do so).
pub async fn resume_right_after_a_dropped_writer(store: Arc<dyn Store>) {
    let staging = key("staging/s5");
    let mut w = store.writer(&staging, None).await.unwrap();
    w.write_all(b"base").await.unwrap();
    w.suspend().await.unwrap();
    let chunk = vec![7u8; 256 << 10];
    for round in 0..20 {
        let mut w = store.writer(&staging, Some(4)).await.unwrap_or_else(|e| {
            panic!("round {round}: reopening right after a dropped writer: {e}")
        });
        w.write_all(&chunk).await.unwrap();
        drop(w);
    }
    let mut w = store.writer(&staging, Some(4)).await.unwrap();
    w.write_all(b"!").await.unwrap();
    let dest = key("blobs/s5");
    assert_eq!(w.commit(dest.clone()).await.unwrap().size, 5);
    assert_eq!(read_all(&*store, &dest, 0).await, b"base!");
    store.delete(&dest).await.unwrap();
}

pub async fn resume_past_the_staged_bytes_fails(store: Arc<dyn Store>) {
    let staging = key("staging/s4");
    let mut w = store.writer(&staging, None).await.unwrap();
    w.write_all(b"12").await.unwrap();
    w.suspend().await.unwrap();
    let r = store.writer(&staging, Some(3)).await.map(|_| ());
    assert_eq!(kind(r), ErrorKind::PreconditionFailed);
    store
        .writer(&staging, Some(2))
        .await
        .unwrap()
        .cancel()
        .await
        .unwrap();
}

pub async fn resume_of_a_missing_staging_area_is_not_found(store: Arc<dyn Store>) {
    let r = store
        .writer(&key("staging/none"), Some(0))
        .await
        .map(|_| ());
    assert_eq!(kind(r), ErrorKind::NotFound);
}

pub async fn a_busy_staging_area_refuses_a_second_writer(store: Arc<dyn Store>) {
    let staging = key("staging/busy");
    let w = store.writer(&staging, None).await.unwrap();
    let second = store.writer(&staging, Some(0)).await.map(|_| ());
    assert_eq!(kind(second), ErrorKind::PreconditionFailed);
    w.suspend().await.unwrap();
    store
        .writer(&staging, Some(0))
        .await
        .unwrap()
        .cancel()
        .await
        .unwrap();
}

pub async fn commit_never_overwrites(store: Arc<dyn Store>) {
    let dest = key("blobs/once");
    let mut w = store.writer(&key("staging/o1"), None).await.unwrap();
    w.write_all(b"first").await.unwrap();
    w.commit(dest.clone()).await.unwrap();
    let mut w = store.writer(&key("staging/o2"), None).await.unwrap();
    w.write_all(b"second").await.unwrap();
    assert_eq!(kind(w.commit(dest.clone()).await), ErrorKind::AlreadyExists);
    assert_eq!(read_all(&*store, &dest, 0).await, b"first");
    assert_eq!(
        kind(store.stat(&key("staging/o2")).await),
        ErrorKind::NotFound
    );
    store.delete(&dest).await.unwrap();
}

pub async fn cancel_removes_the_staging_area(store: Arc<dyn Store>) {
    let staging = key("staging/c");
    let mut w = store.writer(&staging, None).await.unwrap();
    w.write_all(b"x").await.unwrap();
    w.cancel().await.unwrap();
    let r = store.writer(&staging, Some(0)).await.map(|_| ());
    assert_eq!(kind(r), ErrorKind::NotFound);
}

pub async fn read_from_offsets(store: Arc<dyn Store>) {
    let dest = key("blobs/off");
    let mut w = store.writer(&key("staging/off"), None).await.unwrap();
    w.write_all(b"0123456789").await.unwrap();
    w.commit(dest.clone()).await.unwrap();
    assert_eq!(read_all(&*store, &dest, 0).await, b"0123456789");
    assert_eq!(read_all(&*store, &dest, 7).await, b"789");
    assert!(
        read_all(&*store, &dest, 10).await.is_empty(),
        "offset at the end"
    );
    let past = store.read(&dest, 11).await.map(|_| ());
    assert_eq!(kind(past), ErrorKind::PreconditionFailed);
    let (meta, _) = store.read(&dest, 3).await.unwrap();
    assert_eq!(meta.size, 10);
    store.delete(&dest).await.unwrap();
}

pub async fn large_stream(store: Arc<dyn Store>) {
    // Larger than one S3 multipart part (5 MiB), written in uneven pieces over two sessions.
    let data: Vec<u8> = (0..(12u32 << 20) + 4321).map(|i| (i % 253) as u8).collect();
    let staging = key("staging/large");
    let mut w = store.writer(&staging, None).await.unwrap();
    let split = (5 << 20) + 17;
    for piece in data[..split].chunks(300_001) {
        w.write_all(piece).await.unwrap();
    }
    assert_eq!(w.suspend().await.unwrap(), split as u64);
    let mut w = store.writer(&staging, Some(split as u64)).await.unwrap();
    for piece in data[split..].chunks(1 << 20) {
        w.write_all(piece).await.unwrap();
    }
    let dest = key("big/blob");
    assert_eq!(
        w.commit(dest.clone()).await.unwrap().size,
        data.len() as u64
    );
    let back = read_all(&*store, &dest, 0).await;
    assert!(back == data, "large stream came back different");
    assert_eq!(read_all(&*store, &dest, 6 << 20).await, &data[6 << 20..]);
    store.delete(&dest).await.unwrap();
}

async fn read_chunks_all(store: &dyn Store, k: &Key, offset: u64, len: u64) -> Vec<u8> {
    use futures_util::TryStreamExt;
    let (_, body) = store.read_chunks(k, offset, len).await.unwrap();
    let chunks: Vec<bytes::Bytes> = body.try_collect().await.unwrap();
    assert!(
        chunks.iter().all(|c| !c.is_empty()) || chunks.len() <= 1,
        "no empty chunks inside a body"
    );
    chunks.concat()
}

/// `read_chunks`, what a blob GET sends: whole objects, ranges that start and end off any page
/// or window boundary, empty ranges, and ranges past the end refused before any byte is sent.
pub async fn chunked_reads(store: Arc<dyn Store>) {
    // Spans several of the filesystem store's 2 MiB windows with a ragged end.
    let data: Vec<u8> = (0..(5u32 << 20) + 4099).map(|i| (i % 251) as u8).collect();
    let dest = key("big/chunks");
    let mut w = store.writer(&key("staging/chunks"), None).await.unwrap();
    w.write_all(&data).await.unwrap();
    w.commit(dest.clone()).await.unwrap();
    let n = data.len() as u64;
    assert!(
        read_chunks_all(&*store, &dest, 0, n).await == data,
        "whole object"
    );
    for (off, len) in [
        (0, 1),
        (4095, 2),
        ((2 << 20) - 1, 3),
        (4097, (4 << 20) + 5),
        (n - 10, 10),
        (n, 0),
        (17, 0),
    ] {
        let got = read_chunks_all(&*store, &dest, off, len).await;
        assert!(
            got[..] == data[off as usize..(off + len) as usize],
            "range {off}+{len}"
        );
    }
    let (meta, _) = store.read_chunks(&dest, 3, 4).await.unwrap();
    assert_eq!(meta.size, n);
    for (off, len) in [(n, 1), (n - 1, 2), (n + 1, 0), (0, n + 1), (1, u64::MAX)] {
        let r = store.read_chunks(&dest, off, len).await.map(|_| ());
        assert_eq!(kind(r), ErrorKind::PreconditionFailed, "range {off}+{len}");
    }
    let r = store.read_chunks(&key("big/none"), 0, 0).await.map(|_| ());
    assert_eq!(kind(r), ErrorKind::NotFound);
    store.delete(&dest).await.unwrap();
}

pub async fn readers_never_see_partial_documents(store: Arc<dyn Store>) {
    let k = key("docs/flip");
    let a = Bytes::from(vec![b'a'; 256 << 10]);
    let b = Bytes::from(vec![b'b'; 256 << 10]);
    store.put(&k, a.clone(), PutMode::Create).await.unwrap();
    let writer = {
        let store = store.clone();
        let k = k.clone();
        tokio::spawn(async move {
            for i in 0..20 {
                let v = if i % 2 == 0 { b.clone() } else { a.clone() };
                store.put(&k, v, PutMode::Overwrite).await.unwrap();
            }
        })
    };
    for _ in 0..50 {
        let doc = store.get(&k, 1 << 20).await.unwrap();
        assert_eq!(doc.bytes.len(), 256 << 10);
        assert!(
            doc.bytes.iter().all(|&x| x == doc.bytes[0]),
            "mixed document read"
        );
    }
    writer.await.unwrap();
    store.delete(&k).await.unwrap();
}

pub async fn list_by_prefix(store: Arc<dyn Store>) {
    let keys = ["list/a/1", "list/a/2", "list/b/x/y", "lister/no"];
    for k in keys {
        store
            .put(&key(k), Bytes::from_static(b"."), PutMode::Create)
            .await
            .unwrap();
    }
    let got: Vec<String> = store
        .list(&key("list"))
        .await
        .unwrap()
        .iter()
        .map(|k| k.as_str().to_owned())
        .collect();
    assert_eq!(got, ["list/a/1", "list/a/2", "list/b/x/y"]);
    let got = store.list(&key("list/a")).await.unwrap();
    assert_eq!(got.len(), 2);
    assert!(store.list(&key("nothing/here")).await.unwrap().is_empty());
    for k in keys {
        store.delete(&key(k)).await.unwrap();
    }
    assert!(store.list(&key("lister")).await.unwrap().is_empty());
}

/// Pages join up: walked in pages of any size they give every key under the prefix once, in
/// the order of one large page (byte order, or SeaweedFS's directory-by-directory order where
/// `a-x` and `a/…` differ), start after the given key, and are short only at the end.
pub async fn list_in_pages(store: Arc<dyn Store>) {
    let keys = [
        "list/a-x",
        "list/a.x",
        "list/a/1",
        "list/a/2/z",
        "list/a0",
        "list/b/c",
        "list/b/d",
    ];
    for k in keys {
        store
            .put(&key(k), Bytes::from_static(b"."), PutMode::Create)
            .await
            .unwrap();
    }
    store
        .put(&key("lister/no"), Bytes::from_static(b"."), PutMode::Create)
        .await
        .unwrap();
    let names = |v: Vec<Key>| -> Vec<String> { v.iter().map(|k| k.as_str().to_owned()).collect() };
    let all = names(store.list_page(&key("list"), None, 100).await.unwrap());
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(sorted, keys);
    assert_eq!(sorted, names(store.list(&key("list")).await.unwrap()));
    for size in [1, 2, 3] {
        let mut walked = Vec::new();
        let mut after: Option<Key> = None;
        loop {
            let page = store
                .list_page(&key("list"), after.as_ref(), size)
                .await
                .unwrap();
            assert!(page.len() <= size);
            let short = page.len() < size;
            after = page.last().cloned().or(after);
            walked.extend(names(page));
            if short {
                break;
            }
        }
        assert_eq!(walked, all, "pages of {size}");
    }
    // Inside one directory level the order is byte order on every store.
    let got = names(store.list_page(&key("list/b"), None, 10).await.unwrap());
    assert_eq!(got, ["list/b/c", "list/b/d"]);
    let got = names(
        store
            .list_page(&key("list/b"), Some(&key("list/b/c")), 10)
            .await
            .unwrap(),
    );
    assert_eq!(got, ["list/b/d"]);
    let last = key(all.last().unwrap());
    assert!(
        store
            .list_page(&key("list"), Some(&last), 5)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .list_page(&key("nothing"), None, 5)
            .await
            .unwrap()
            .is_empty()
    );
    for k in keys.iter().chain(["lister/no"].iter()) {
        store.delete(&key(k)).await.unwrap();
    }
}

pub async fn delete_and_missing_keys(store: Arc<dyn Store>) {
    let k = key("docs/missing");
    assert_eq!(kind(store.get(&k, 10).await), ErrorKind::NotFound);
    assert_eq!(kind(store.stat(&k).await), ErrorKind::NotFound);
    assert_eq!(
        kind(store.read(&k, 0).await.map(|_| ())),
        ErrorKind::NotFound
    );
    assert_eq!(kind(store.delete(&k).await), ErrorKind::NotFound);
    // A prefix that holds keys is not itself an object.
    store
        .put(
            &key("docs/dir/leaf"),
            Bytes::from_static(b"1"),
            PutMode::Create,
        )
        .await
        .unwrap();
    assert_eq!(
        kind(store.stat(&key("docs/dir")).await),
        ErrorKind::NotFound
    );
    assert_eq!(
        kind(store.get(&key("docs/dir"), 10).await),
        ErrorKind::NotFound
    );
    store.delete(&key("docs/dir/leaf")).await.unwrap();
}

pub async fn invalid_keys_are_refused(_store: Arc<dyn Store>) {
    for bad in [
        "",
        "../escape",
        "a/../../b",
        "/abs",
        "a//b",
        ".tmp/x",
        "a/.locks",
        "sp ace",
    ] {
        assert_eq!(kind(Key::new(bad)), ErrorKind::InvalidKey, "{bad:?}");
    }
}
