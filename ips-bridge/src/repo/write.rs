//! How a repository's files are written: whole (a temporary file renamed into place) and with
//! the modes pkgrepo and pkgsend give them.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

use super::{RepoError, io_err};

/// The mode of every file a repository holds: pkgrepo and pkgsend write them 0644, and
/// `pkgrepo info` and pkg.depotd refuse catalog files others cannot read. (A temporary file
/// is created 0600, and would keep that mode when renamed into place.)
pub(crate) const FILE_MODE: u32 = 0o644;
/// The mode of every directory a repository holds, as pkgrepo and pkgsend make them.
pub(crate) const DIR_MODE: u32 = 0o755;

/// Gives `file` (open, not yet in place) the repository's [`FILE_MODE`].
pub(crate) fn set_file_mode(file: &File, path: &Path) -> Result<(), RepoError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(fs::Permissions::from_mode(FILE_MODE))
            .map_err(io_err(path))?;
    }
    #[cfg(not(unix))]
    let _ = (file, path);
    Ok(())
}

/// Creates `dir` and its missing parents, each new one with [`DIR_MODE`] whatever the umask;
/// directories that exist already keep their mode.
pub(crate) fn create_dirs(dir: &Path) -> Result<(), RepoError> {
    let mut missing = Vec::new();
    let mut d = dir;
    while !d.as_os_str().is_empty() && !d.is_dir() {
        missing.push(d);
        match d.parent() {
            Some(p) => d = p,
            None => break,
        }
    }
    for d in missing.into_iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => {
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    fs::set_permissions(d, fs::Permissions::from_mode(DIR_MODE))
                        .map_err(io_err(d))?;
                }
            }
            // Another publisher (thread or process) made it meanwhile.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(io_err(d)(e)),
        }
    }
    Ok(())
}

/// Writes `data` to `path` atomically (temporary file in the same directory, synced, then
/// renamed), mode [`FILE_MODE`].
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> Result<(), RepoError> {
    write_renamed(path, data, true)
}

/// [`write_atomic`], with the sync only when `durable`: a reader never sees half a file either
/// way, but without the sync a crash may leave the old content or an empty file.
pub(crate) fn write_renamed(path: &Path, data: &[u8], durable: bool) -> Result<(), RepoError> {
    let dir = path.parent().expect("paths here have parents");
    create_dirs(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io_err(dir))?;
    tmp.write_all(data).map_err(io_err(path))?;
    set_file_mode(tmp.as_file(), path)?;
    if durable {
        tmp.as_file().sync_all().map_err(io_err(path))?;
    }
    tmp.persist(path).map_err(|e| RepoError::Io {
        path: path.to_owned(),
        source: e.error,
    })?;
    Ok(())
}
