//! Users from an htpasswd file (`htpasswd -B`: bcrypt only), and a short-lived cache of
//! successful checks, because bcrypt is slow on purpose and clients send credentials with
//! every request.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

use super::AuthError;

/// Cached successful checks kept at most; the cache is emptied when it is full, so memory stays
/// bounded whatever callers send.
const CACHE_MAX: usize = 4096;

/// The users of an htpasswd file.
#[derive(Debug)]
pub(crate) struct Htpasswd {
    users: HashMap<String, String>,
    /// A bcrypt hash no password matches, checked for unknown users so that they take as long
    /// as known ones.
    dummy: String,
    /// Mixed into cache keys so the cache holds no plain hash of any password.
    salt: [u8; 16],
    ttl: Duration,
    cache: Mutex<HashMap<[u8; 32], Instant>>,
    /// bcrypt runs at once, one per core: wrong passwords sent in a flood queue here instead
    /// of filling the blocking pool the filesystem store also works on.
    bcrypt_slots: tokio::sync::Semaphore,
}

impl Htpasswd {
    /// Reads `path`: `user:hash` lines, `#` comments and blank lines. Hash kinds other than
    /// bcrypt (`$2a$`, `$2b$`, `$2x$`, `$2y$`) are refused with the file and line.
    pub(crate) fn load(path: &Path, ttl: Duration) -> Result<Htpasswd, AuthError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthError::Read {
            what: "htpasswd file",
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text, ttl)
    }

    pub(crate) fn parse(path: &Path, text: &str, ttl: Duration) -> Result<Htpasswd, AuthError> {
        let bad = |line: usize, reason: String| AuthError::Htpasswd {
            path: PathBuf::from(path),
            line,
            reason,
        };
        let mut users = HashMap::new();
        let mut cost = 5;
        for (i, l) in text.lines().enumerate() {
            let line = i + 1;
            let l = l.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let Some((user, hash)) = l.split_once(':') else {
                return Err(bad(line, "expected user:hash".to_owned()));
            };
            if user.is_empty() {
                return Err(bad(line, "empty user name".to_owned()));
            }
            let parts = bcrypt_parts(hash).ok_or_else(|| {
                bad(
                    line,
                    format!(
                        "the hash of {user:?} is not bcrypt ({}); only bcrypt is accepted: make it with `htpasswd -B`",
                        hash_kind(hash)
                    ),
                )
            })?;
            cost = cost.max(parts);
            if users.insert(user.to_owned(), hash.to_owned()).is_some() {
                return Err(bad(line, format!("user {user:?} appears twice")));
            }
        }
        // A hash of a random password at the highest cost in the file.
        let dummy = bcrypt::hash(uuid::Uuid::new_v4().as_bytes(), cost)
            .map_err(|e| bad(0, format!("cannot make the timing hash: {e}")))?;
        Ok(Htpasswd {
            users,
            dummy,
            salt: *uuid::Uuid::new_v4().as_bytes(),
            ttl,
            cache: Mutex::new(HashMap::new()),
            bcrypt_slots: tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, |n| n.get()),
            ),
        })
    }

    /// How many users the file has.
    pub(crate) fn len(&self) -> usize {
        self.users.len()
    }

    fn cache_key(&self, user: &str, password: &str) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.salt);
        h.update((user.len() as u64).to_be_bytes());
        h.update(user.as_bytes());
        h.update(password.as_bytes());
        h.finalize().into()
    }

    /// Checks a user's password. A recent success for the same pair is answered from the cache;
    /// everything else runs bcrypt on a blocking thread (unknown users against a dummy hash, so
    /// the answer takes as long).
    pub(crate) async fn verify(&self, user: &str, password: &str) -> bool {
        let key = self.cache_key(user, password);
        let now = Instant::now();
        {
            let mut cache = self.cache.lock().expect("cache lock");
            match cache.get(&key) {
                Some(until) if *until > now => return true,
                Some(_) => {
                    cache.remove(&key);
                }
                None => {}
            }
        }
        let (hash, known) = match self.users.get(user) {
            Some(h) => (h.clone(), true),
            None => (self.dummy.clone(), false),
        };
        let password = password.to_owned();
        let Ok(_slot) = self.bcrypt_slots.acquire().await else {
            return false;
        };
        let ok = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(false)
            && known;
        if ok && !self.ttl.is_zero() {
            let mut cache = self.cache.lock().expect("cache lock");
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
            cache.insert(key, now + self.ttl);
        }
        ok
    }
}

/// The cost of a bcrypt hash (`$2y$10$...`), or None when it is not one.
fn bcrypt_parts(hash: &str) -> Option<u32> {
    let rest = hash.strip_prefix('$')?;
    let (version, rest) = rest.split_once('$')?;
    if !matches!(version, "2a" | "2b" | "2x" | "2y") {
        return None;
    }
    let (cost, rest) = rest.split_once('$')?;
    let cost: u32 = cost.parse().ok()?;
    ((4..=31).contains(&cost) && rest.len() == 53).then_some(cost)
}

/// What a non-bcrypt htpasswd hash is, for the error message.
fn hash_kind(hash: &str) -> &'static str {
    if hash.starts_with("$apr1$") {
        "Apache MD5, htpasswd -m"
    } else if hash.starts_with("{SHA}") {
        "SHA-1, htpasswd -s"
    } else if hash.starts_with("$5$") || hash.starts_with("$6$") {
        "SHA-crypt"
    } else if hash.starts_with("$2") {
        "a malformed bcrypt hash"
    } else {
        "crypt or plain text"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bcrypt_users_verify_and_other_kinds_are_refused_by_line() {
        let alice = bcrypt::hash("s3cret", 4).unwrap();
        let text = format!("# users\n\nalice:{alice}\n");
        let h = Htpasswd::parse(Path::new("users"), &text, Duration::from_secs(60)).unwrap();
        assert!(h.verify("alice", "s3cret").await);
        // From the cache the second time; a wrong password is still wrong.
        assert!(h.verify("alice", "s3cret").await);
        assert!(!h.verify("alice", "s3cret ").await);
        assert!(!h.verify("bob", "s3cret").await);
        assert_eq!(h.cache.lock().unwrap().len(), 1);

        for (bad, want) in [
            (format!("alice:{alice}\nbob:$apr1$x$y\n"), "users:2: "),
            ("carol:{SHA}abc=\n".to_owned(), "users:1: "),
            ("dave:plain\n".to_owned(), "users:1: "),
            ("nohash\n".to_owned(), "users:1: expected user:hash"),
            (
                format!("a:{alice}\na:{alice}\n"),
                "users:2: user \"a\" appears twice",
            ),
        ] {
            let e = Htpasswd::parse(Path::new("users"), &bad, Duration::ZERO).unwrap_err();
            assert!(e.to_string().starts_with(want), "{bad}: {e}");
        }
    }

    /// With every bcrypt slot taken, a check waits for one instead of starting another bcrypt;
    /// a cached success needs no slot.
    #[tokio::test]
    async fn bcrypt_checks_wait_for_a_slot() {
        let alice = bcrypt::hash("s3cret", 4).unwrap();
        let h = Htpasswd::parse(
            Path::new("users"),
            &format!("alice:{alice}\n"),
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(h.verify("alice", "s3cret").await);
        let all = h.bcrypt_slots.available_permits() as u32;
        let taken = h.bcrypt_slots.acquire_many(all).await.unwrap();
        assert!(h.verify("alice", "s3cret").await, "cached: no slot needed");
        let waiting =
            tokio::time::timeout(Duration::from_millis(300), h.verify("alice", "wrong")).await;
        assert!(waiting.is_err(), "a bcrypt ran without a slot");
        drop(taken);
        assert!(!h.verify("alice", "wrong").await);
    }
}
