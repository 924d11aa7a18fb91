//! A local payload cache keyed by payload name (the SHA-1 of the content), shared across
//! builds: `<dir>/<h[0:2]>/<h>` holds the stored (gzip) payload exactly as a repository does.
//!
//! Only verified payloads enter the cache: a download goes to a temporary file in the cache
//! directory, is checked against every hash its action names, and is then renamed into
//! place. Concurrent fetches of the same payload are harmless (same content, atomic rename).

use std::fs::{self, File};
use std::io::{self, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::payload::{PayloadError, PayloadHashes};

/// A directory of verified payloads.
#[derive(Debug, Clone)]
pub struct PayloadCache {
    dir: PathBuf,
}

/// Why a payload could not be put into or read from the cache.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError<E: std::error::Error + 'static> {
    /// The cache directory could not be used.
    #[error("payload cache {path}: i/o error")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The downloaded payload failed verification; it was not cached.
    #[error("payload {name} failed verification")]
    Verify {
        /// The payload name.
        name: String,
        /// Why.
        #[source]
        source: PayloadError,
    },
    /// The fetch function failed.
    #[error("payload {name}: fetch failed")]
    Fetch {
        /// The payload name.
        name: String,
        /// The fetch error.
        #[source]
        source: E,
    },
}

impl PayloadCache {
    /// A cache rooted at `dir` (created on first use).
    pub fn new(dir: impl AsRef<Path>) -> Self {
        Self {
            dir: dir.as_ref().to_owned(),
        }
    }

    /// Where payload `name` is (or would be) cached.
    pub fn path(&self, name: &str) -> PathBuf {
        let safe: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let prefix: String = safe.chars().take(2).collect();
        self.dir.join(prefix).join(safe)
    }

    /// Returns the cached payload for `hashes`, fetching it with `fetch` (which writes the
    /// stored bytes into the file it is given) when it is not cached yet. The payload is
    /// verified before it enters the cache. A cached file is trusted: it was verified on
    /// entry.
    pub fn get_or_fetch<E, F>(
        &self,
        hashes: &PayloadHashes,
        fetch: F,
    ) -> Result<PathBuf, CacheError<E>>
    where
        E: std::error::Error + 'static,
        F: FnOnce(&mut File) -> Result<(), E>,
    {
        let dest = self.path(&hashes.name);
        if dest.is_file() {
            return Ok(dest);
        }
        let dir = dest.parent().expect("cache paths have parents").to_owned();
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| CacheError::Io { path, source }
        };
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let mut tmp = tempfile::NamedTempFile::new_in(&dir).map_err(io(&dir))?;
        fetch(tmp.as_file_mut()).map_err(|source| CacheError::Fetch {
            name: hashes.name.clone(),
            source,
        })?;
        let f = tmp.as_file_mut();
        f.flush().map_err(io(&dest))?;
        f.seek(SeekFrom::Start(0)).map_err(io(&dest))?;
        hashes
            .verify(BufReader::new(&*f), io::sink())
            .map_err(|source| CacheError::Verify {
                name: hashes.name.clone(),
                source,
            })?;
        f.sync_all().map_err(io(&dest))?;
        tmp.persist(&dest).map_err(|e| CacheError::Io {
            path: dest.clone(),
            source: e.error,
        })?;
        Ok(dest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Action;
    use crate::payload::compress;
    use std::convert::Infallible;

    #[test]
    fn caches_only_verified_payloads() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = PayloadCache::new(tmp.path());
        let mut gz = Vec::new();
        let info = compress(&b"cached content"[..], &mut gz).unwrap();
        let mut a = Action::parse("file NOHASH path=x").unwrap();
        info.apply_to(&mut a);
        let hashes = PayloadHashes::from_action(&a).unwrap();

        // A bad download is refused and leaves nothing behind.
        let r = cache.get_or_fetch(&hashes, |f| {
            f.write_all(b"garbage").unwrap();
            Ok::<_, Infallible>(())
        });
        assert!(matches!(r, Err(CacheError::Verify { .. })));
        assert!(!cache.path(&info.sha1).exists());

        let p = cache
            .get_or_fetch(&hashes, |f| {
                f.write_all(&gz).unwrap();
                Ok::<_, Infallible>(())
            })
            .unwrap();
        assert_eq!(p, tmp.path().join(&info.sha1[..2]).join(&info.sha1));
        assert_eq!(fs::read(&p).unwrap(), gz);
        // Cached: the fetch function is not called again.
        let again = cache
            .get_or_fetch(&hashes, |_| -> Result<(), io::Error> {
                panic!("fetched twice")
            })
            .unwrap();
        assert_eq!(again, p);
        assert_eq!(
            fs::read_dir(p.parent().unwrap()).unwrap().count(),
            1,
            "no temp files left"
        );
    }
}
