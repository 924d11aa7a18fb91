//! Ownership marks, and the atomic writes every durable record goes through.
//!
//! The worker writes a mark into each directory it creates (the content store, each zone's
//! zonepath, its staging area) and checks the mark before it changes or deletes anything there:
//! a directory without our mark, or with another worker's, is never touched. The mark of a zone
//! sits in the zonepath beside `root/`, never inside the root, because image content lands in
//! the root and an image could ship a forged mark.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// File name of the mark.
pub const MARK_FILE: &str = ".rdctl-owner";
/// The name prefix of [`write_atomic`]'s temporary files.
const TMP_PREFIX: &str = ".tmp-";

/// What the mark says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerMark {
    /// Always `rdctl-worker`.
    pub owner: String,
    /// The worker that created the directory (`worker_id` in worker.toml).
    pub worker_id: String,
    /// What the directory is: `content-store`, `zone`, `staging`, `state`.
    pub kind: String,
}

impl OwnerMark {
    /// A mark for `kind` by `worker_id`.
    pub fn new(worker_id: &str, kind: &str) -> Self {
        OwnerMark {
            owner: "rdctl-worker".into(),
            worker_id: worker_id.into(),
            kind: kind.into(),
        }
    }
}

/// A directory is not ours, or its mark cannot be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OwnershipError {
    /// The directory exists, holds something, and carries no mark.
    #[error("{path}: exists without an rdctl ownership mark; refusing to touch it")]
    Unmarked {
        /// The directory.
        path: PathBuf,
    },
    /// The mark names another worker or another kind of directory.
    #[error("{path}: owned by worker {worker_id:?} as {kind:?}, not by this worker as {wanted:?}")]
    Foreign {
        /// The directory.
        path: PathBuf,
        /// Who owns it.
        worker_id: String,
        /// As what.
        kind: String,
        /// What this worker expected.
        wanted: String,
    },
    /// The mark is not valid JSON.
    #[error("{path}: unreadable ownership mark")]
    BadMark {
        /// The mark file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// Reading or writing failed.
    #[error("{path}: {op} failed")]
    Io {
        /// The path.
        path: PathBuf,
        /// The operation.
        op: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

fn io_err(path: &Path, op: &'static str) -> impl FnOnce(io::Error) -> OwnershipError + use<> {
    let path = path.to_owned();
    move |source| OwnershipError::Io { path, op, source }
}

/// Writes `bytes` to `path` through an exclusive temporary file in the same directory, synced,
/// then renamed over the target, so readers see the old or the new content, never a part.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(TMP_PREFIX)
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Reads the mark of `dir`, if any.
pub fn read_mark(dir: &Path) -> Result<Option<OwnerMark>, OwnershipError> {
    let file = dir.join(MARK_FILE);
    match std::fs::read(&file) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|source| OwnershipError::BadMark { path: file, source }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(&file, "reading the ownership mark")(e)),
    }
}

/// Succeeds only when `dir` carries `mark` (same worker, same kind).
pub fn check(dir: &Path, mark: &OwnerMark) -> Result<(), OwnershipError> {
    match read_mark(dir)? {
        Some(m)
            if m.owner == mark.owner && m.worker_id == mark.worker_id && m.kind == mark.kind =>
        {
            Ok(())
        }
        Some(m) => Err(OwnershipError::Foreign {
            path: dir.to_owned(),
            worker_id: m.worker_id,
            kind: m.kind,
            wanted: mark.kind.clone(),
        }),
        None => Err(OwnershipError::Unmarked {
            path: dir.to_owned(),
        }),
    }
}

/// Creates `dir` (and its parents) carrying `mark`, or checks the mark of an existing one. An
/// existing empty directory is claimed, and so is one a claim cut short left (only the mark's
/// temporary files in it); any other directory without our mark is refused.
pub fn claim(dir: &Path, mark: &OwnerMark) -> Result<(), OwnershipError> {
    match std::fs::read_dir(dir) {
        Ok(_) => {
            if read_mark(dir)?.is_some() {
                return check(dir, mark);
            }
            if !only_temporaries(dir)? {
                return Err(OwnershipError::Unmarked {
                    path: dir.to_owned(),
                });
            }
            remove_temporaries(dir)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io_err(dir, "creating the directory"))?;
        }
        Err(e) => return Err(io_err(dir, "reading the directory")(e)),
    }
    let bytes = serde_json::to_vec_pretty(mark).expect("a mark serialises");
    write_atomic(&dir.join(MARK_FILE), &bytes).map_err(io_err(dir, "writing the ownership mark"))
}

/// Whether `dir` holds nothing but temporary files of [`write_atomic`] (or nothing at all):
/// without a mark, that is what a [`claim`] cut short leaves, and it holds no data, whoever
/// made it.
fn only_temporaries(dir: &Path) -> Result<bool, OwnershipError> {
    let entries = std::fs::read_dir(dir).map_err(io_err(dir, "reading the directory"))?;
    for e in entries {
        let e = e.map_err(io_err(dir, "reading the directory"))?;
        let is_file = e.file_type().is_ok_and(|t| t.is_file());
        if !(is_file && e.file_name().to_string_lossy().starts_with(TMP_PREFIX)) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Removes `dir` when it is what an interrupted [`claim`] left: no mark, and only the mark's
/// temporary file (a worker killed between creating the directory and renaming its mark into
/// it), or nothing. Returns whether it did; anything else is left as it is.
pub fn remove_interrupted_claim(dir: &Path) -> Result<bool, OwnershipError> {
    if read_mark(dir)?.is_some() || !only_temporaries(dir)? {
        return Ok(false);
    }
    remove_temporaries(dir)?;
    std::fs::remove_dir(dir).map_err(io_err(dir, "removing the directory"))?;
    Ok(true)
}

/// Removes the files of a directory that [`only_temporaries`] found holds nothing else.
fn remove_temporaries(dir: &Path) -> Result<(), OwnershipError> {
    for e in std::fs::read_dir(dir).map_err(io_err(dir, "reading the directory"))? {
        let path = e.map_err(io_err(dir, "reading the directory"))?.path();
        std::fs::remove_file(&path).map_err(io_err(&path, "removing the file"))?;
    }
    Ok(())
}

/// Removes `dir` and everything in it, after checking that it carries `mark`.
pub fn remove_owned(dir: &Path, mark: &OwnerMark) -> Result<(), OwnershipError> {
    check(dir, mark)?;
    // The mark goes last, so a removal cut short leaves a directory that is still ours and is
    // removed by the next attempt. std's remove_dir_all does not follow symlinks.
    let entries = std::fs::read_dir(dir).map_err(io_err(dir, "reading the directory"))?;
    for e in entries {
        let e = e.map_err(io_err(dir, "reading the directory"))?;
        if e.file_name() == MARK_FILE {
            continue;
        }
        let path = e.path();
        let is_dir = e
            .file_type()
            .map_err(io_err(&path, "reading the file type"))?
            .is_dir();
        if is_dir {
            std::fs::remove_dir_all(&path).map_err(io_err(&path, "removing the directory"))?;
        } else {
            std::fs::remove_file(&path).map_err(io_err(&path, "removing the file"))?;
        }
    }
    let file = dir.join(MARK_FILE);
    std::fs::remove_file(&file).map_err(io_err(&file, "removing the ownership mark"))?;
    std::fs::remove_dir(dir).map_err(io_err(dir, "removing the directory"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_empty_or_own_and_refuses_foreign_or_unmarked() {
        let t = tempfile::tempdir().unwrap();
        let me = OwnerMark::new("w1", "zone");
        let fresh = t.path().join("a/b");
        claim(&fresh, &me).unwrap();
        check(&fresh, &me).unwrap();
        // Claiming again is fine; another worker or kind is refused.
        claim(&fresh, &me).unwrap();
        let other = OwnerMark::new("w2", "zone");
        assert!(matches!(
            claim(&fresh, &other),
            Err(OwnershipError::Foreign { .. })
        ));
        assert!(matches!(
            check(&fresh, &OwnerMark::new("w1", "content-store")),
            Err(OwnershipError::Foreign { .. })
        ));
        // A directory someone else filled is never claimed or removed.
        let theirs = t.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::write(theirs.join("data"), b"x").unwrap();
        assert!(matches!(
            claim(&theirs, &me),
            Err(OwnershipError::Unmarked { .. })
        ));
        assert!(remove_owned(&theirs, &me).is_err());
        assert!(theirs.join("data").exists());
        // An empty directory is claimed; an owned one is removed.
        let empty = t.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        claim(&empty, &me).unwrap();
        remove_owned(&empty, &me).unwrap();
        assert!(!empty.exists());
        // A claim cut short before its mark was renamed into place leaves only the mark's
        // temporary file: claimed again, and removable as a leftover; anything more is not.
        let cut = t.path().join("cut");
        std::fs::create_dir(&cut).unwrap();
        std::fs::write(cut.join(".tmp-abc123"), b"{\"worker_id\": \"w").unwrap();
        claim(&cut, &me).unwrap();
        check(&cut, &me).unwrap();
        assert!(!cut.join(".tmp-abc123").exists());
        let cut2 = t.path().join("cut2");
        std::fs::create_dir(&cut2).unwrap();
        std::fs::write(cut2.join(".tmp-abc123"), b"").unwrap();
        assert!(remove_interrupted_claim(&cut2).unwrap());
        assert!(!cut2.exists());
        assert!(!remove_interrupted_claim(&theirs).unwrap());
        assert!(theirs.join("data").exists());
        assert!(
            !remove_interrupted_claim(&fresh).unwrap(),
            "a marked directory is not a leftover"
        );
        // A corrupt mark is an error, not a claim.
        std::fs::write(fresh.join(MARK_FILE), b"{").unwrap();
        assert!(matches!(
            check(&fresh, &me),
            Err(OwnershipError::BadMark { .. })
        ));
    }

    #[test]
    fn atomic_write_replaces_whole_content() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two two");
        // No temporary files are left behind.
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 1);
    }
}
