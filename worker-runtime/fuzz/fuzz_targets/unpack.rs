//! Any bytes as a layer unpacked into a zone root, twice (the second pass meets what the first
//! made: overwrites, whiteouts, opaque directories, links through existing symlinks): an error
//! or a root, never a panic, and nothing outside the root changes. Beside the root are sentinel
//! files (`outside/etc/passwd`) that hostile links name by relative and absolute path. The first
//! byte picks the compression (none, gzip, zstd), the rest is the blob; a plain layer that
//! unpacks has the DiffID of its bytes.
#![no_main]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use validator::{Algorithm, Compression, Digest};
use worker_runtime::{RootDir, UnpackOptions, apply_stream};

/// Everything under `dir` except `skip`: path → (kind, bytes or link target, mode).
fn snapshot(dir: &Path, skip: &Path, out: &mut BTreeMap<PathBuf, (u8, Vec<u8>, u32)>) {
    use std::os::unix::fs::PermissionsExt as _;
    for e in std::fs::read_dir(dir).expect("read the scratch directory").flatten() {
        let p = e.path();
        if p == skip {
            continue;
        }
        let m = std::fs::symlink_metadata(&p).expect("stat outside the root");
        let mode = m.permissions().mode();
        if m.is_dir() {
            out.insert(p.clone(), (b'd', Vec::new(), mode));
            snapshot(&p, skip, out);
        } else if m.file_type().is_symlink() {
            let t = std::fs::read_link(&p).expect("read a link outside the root");
            out.insert(p, (b'l', t.into_os_string().into_encoded_bytes(), mode));
        } else {
            let bytes = std::fs::read(&p).expect("read a file outside the root");
            out.insert(p, (b'f', bytes, mode));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, blob)) = data.split_first() else {
        return;
    };
    let compression = match pick % 3 {
        0 => Compression::None,
        1 => Compression::Gzip,
        _ => Compression::Zstd,
    };
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let root_path = scratch.path().join("root");
    std::fs::create_dir(&root_path).expect("the root");
    let etc = scratch.path().join("outside/etc");
    std::fs::create_dir_all(&etc).expect("the sentinel directory");
    std::fs::write(etc.join("passwd"), b"host passwd").expect("a sentinel");
    std::fs::write(etc.join("shadow"), b"host shadow").expect("a sentinel");
    let mut before = BTreeMap::new();
    snapshot(scratch.path(), &root_path, &mut before);

    let root = RootDir::open(&root_path).expect("open the root");
    let opts = UnpackOptions::default();
    for _ in 0..2 {
        match apply_stream(&root, blob, compression, Algorithm::Sha256, &opts) {
            Ok(stats) if compression == Compression::None => {
                assert_eq!(stats.diff_id, Some(Digest::sha256(blob)));
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let mut after = BTreeMap::new();
    snapshot(scratch.path(), &root_path, &mut after);
    assert_eq!(before, after, "something outside the root changed");
});
