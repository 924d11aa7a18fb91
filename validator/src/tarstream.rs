//! A streaming tar reader that refuses ambiguity.
//!
//! Why our own instead of the `tar` crate: we must see the raw ustar fields next to the PAX and
//! GNU records to detect parser differentials (a PAX `size` that disagrees with the ustar size,
//! a header-only entry with a non-zero size, PAX keys given twice, GNU long names mixed with
//! PAX paths: each lets two tar readers see different files in one stream), and we must bound
//! the memory of long-name and PAX records before reading them (the `tar` crate reads them
//! whole). The reader holds at most one record of `max_record_bytes` in memory.

use std::io::{self, Read};

/// Limits applied while reading.
#[derive(Debug, Clone)]
pub struct TarLimits {
    /// Largest PAX or GNU long-name record.
    pub max_record_bytes: u64,
    /// Most entries in one layer.
    pub max_entries: u64,
    /// Longest path (illumos `PATH_MAX` is 1024 including the NUL).
    pub max_path_len: usize,
    /// Longest path component (illumos `MAXNAMELEN` is 256 including the NUL).
    pub max_component_len: usize,
}

impl Default for TarLimits {
    fn default() -> Self {
        TarLimits {
            max_record_bytes: 1 << 20,
            max_entries: 1 << 21,
            max_path_len: 1023,
            max_component_len: 255,
        }
    }
}

/// The kind of a tar entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file (typeflags `0`, NUL and the contiguous `7`).
    Regular,
    /// A hard link to an earlier path.
    HardLink,
    /// A symbolic link.
    Symlink,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A directory.
    Directory,
    /// A FIFO.
    Fifo,
}

impl EntryKind {
    /// Entries that carry no data even when their size field says otherwise.
    pub fn is_header_only(self) -> bool {
        !matches!(self, EntryKind::Regular)
    }
}

/// One entry's metadata, with PAX and GNU records applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarEntry {
    /// The name as stored (not normalised), without a trailing NUL.
    pub path: Vec<u8>,
    /// The kind.
    pub kind: EntryKind,
    /// Bytes of data that follow.
    pub size: u64,
    /// Link target for hard and symbolic links.
    pub link_name: Vec<u8>,
    /// Permission bits including setuid, setgid and sticky.
    pub mode: u32,
    /// Owner id.
    pub uid: u64,
    /// Group id.
    pub gid: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// Device major number.
    pub dev_major: u32,
    /// Device minor number.
    pub dev_minor: u32,
    /// Extended attributes from PAX `SCHILY.xattr.*` records.
    pub xattrs: Vec<(String, Vec<u8>)>,
    /// Offset of the entry's header in the tar stream.
    pub offset: u64,
}

/// What kind of problem a [`TarError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TarErrorKind {
    /// Malformed header, number or record.
    Header,
    /// A typeflag layers must not use.
    EntryType,
    /// The stream ended early or without end blocks.
    Truncated,
    /// PAX size disagrees with the ustar size, or a header-only entry has a size.
    SizeMismatch,
    /// Repeated PAX keys, or GNU and PAX names together.
    Ambiguous,
    /// Over a limit.
    Limit,
    /// The underlying reader failed.
    Io,
}

/// A tar stream that cannot be read safely.
#[derive(Debug, thiserror::Error)]
#[error("tar offset {offset}: {message}")]
pub struct TarError {
    /// What kind of problem.
    pub kind: TarErrorKind,
    /// Offset of the header (or read position) where it was found.
    pub offset: u64,
    /// What is wrong.
    pub message: String,
    /// The I/O error, for [`TarErrorKind::Io`].
    #[source]
    pub source: Option<io::Error>,
}

impl TarError {
    fn new(kind: TarErrorKind, offset: u64, message: impl Into<String>) -> Self {
        TarError {
            kind,
            offset,
            message: message.into(),
            source: None,
        }
    }

    fn io(offset: u64, e: io::Error) -> Self {
        TarError {
            kind: TarErrorKind::Io,
            offset,
            message: "read failed".into(),
            source: Some(e),
        }
    }
}

const BLOCK: usize = 512;

/// Reads a tar stream entry by entry.
pub struct TarReader<R> {
    inner: R,
    limits: TarLimits,
    /// Bytes consumed from `inner`.
    pos: u64,
    /// Data bytes of the current entry not yet read.
    remaining: u64,
    /// Padding after the current entry's data.
    padding: u64,
    entries: u64,
    done: bool,
}

#[derive(Default)]
struct Pending {
    pax: Vec<(String, Vec<u8>)>,
    /// The keys of `pax`, so a repeated key is found in one lookup: a linear scan per key made
    /// a layer of many tiny PAX records cost minutes per entry.
    pax_keys: std::collections::HashSet<String>,
    /// Bytes of the PAX records read for this entry: consecutive `x` records share
    /// `max_record_bytes`, as one record would.
    pax_bytes: u64,
    gnu_name: Option<Vec<u8>>,
    gnu_link: Option<Vec<u8>>,
}

impl<R: Read> TarReader<R> {
    /// A reader over `inner` with `limits`.
    pub fn new(inner: R, limits: TarLimits) -> Self {
        TarReader {
            inner,
            limits,
            pos: 0,
            remaining: 0,
            padding: 0,
            entries: 0,
            done: false,
        }
    }

    /// Bytes consumed from the underlying reader.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The underlying reader, positioned after what was consumed (after the end blocks once
    /// [`TarReader::next_entry`] returned `None`).
    pub fn into_inner(self) -> R {
        self.inner
    }

    /// Reads the current entry's data.
    pub fn read_data(&mut self, buf: &mut [u8]) -> Result<usize, TarError> {
        if self.remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = usize::try_from(self.remaining).map_or(buf.len(), |r| r.min(buf.len()));
        let n = self
            .inner
            .read(&mut buf[..want])
            .map_err(|e| TarError::io(self.pos, e))?;
        if n == 0 {
            return Err(TarError::new(
                TarErrorKind::Truncated,
                self.pos,
                format!(
                    "stream ended with {} bytes of entry data missing",
                    self.remaining
                ),
            ));
        }
        self.pos += n as u64;
        self.remaining -= n as u64;
        Ok(n)
    }

    fn skip(&mut self, mut n: u64) -> Result<(), TarError> {
        let mut buf = [0u8; 8192];
        while n > 0 {
            let want = usize::try_from(n).map_or(buf.len(), |x| x.min(buf.len()));
            let got = self
                .inner
                .read(&mut buf[..want])
                .map_err(|e| TarError::io(self.pos, e))?;
            if got == 0 {
                return Err(TarError::new(
                    TarErrorKind::Truncated,
                    self.pos,
                    "stream ended inside entry data or padding",
                ));
            }
            self.pos += got as u64;
            n -= got as u64;
        }
        Ok(())
    }

    /// Reads one block; `Ok(false)` on a clean end of stream before any byte of it.
    fn read_block(&mut self, block: &mut [u8; BLOCK]) -> Result<bool, TarError> {
        let mut filled = 0;
        while filled < BLOCK {
            let n = self
                .inner
                .read(&mut block[filled..])
                .map_err(|e| TarError::io(self.pos, e))?;
            if n == 0 {
                if filled == 0 {
                    return Ok(false);
                }
                return Err(TarError::new(
                    TarErrorKind::Truncated,
                    self.pos,
                    format!("stream ended inside a header ({filled} of 512 bytes)"),
                ));
            }
            filled += n;
            self.pos += n as u64;
        }
        Ok(true)
    }

    fn read_record(&mut self, size: u64, what: &str, at: u64) -> Result<Vec<u8>, TarError> {
        if size > self.limits.max_record_bytes {
            return Err(TarError::new(
                TarErrorKind::Limit,
                at,
                format!(
                    "{what} record of {size} bytes is over the {} byte limit",
                    self.limits.max_record_bytes
                ),
            ));
        }
        let mut data = vec![0u8; size as usize];
        self.inner.read_exact(&mut data).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                TarError::new(
                    TarErrorKind::Truncated,
                    at,
                    format!("stream ended inside a {what} record"),
                )
            } else {
                TarError::io(at, e)
            }
        })?;
        self.pos += size;
        self.skip(pad(size))?;
        Ok(data)
    }

    /// The next entry, or `None` after the two end-of-archive blocks.
    pub fn next_entry(&mut self) -> Result<Option<TarEntry>, TarError> {
        if self.done {
            return Ok(None);
        }
        self.skip(self.remaining + self.padding)?;
        self.remaining = 0;
        self.padding = 0;
        let mut pending = Pending::default();
        let mut block = [0u8; BLOCK];
        loop {
            let at = self.pos;
            if !self.read_block(&mut block)? {
                return Err(TarError::new(
                    TarErrorKind::Truncated,
                    at,
                    "stream ended without the end-of-archive blocks",
                ));
            }
            if block.iter().all(|&b| b == 0) {
                self.end_of_archive(&mut block, &pending, at)?;
                return Ok(None);
            }
            check_checksum(&block, at)?;
            let typeflag = block[156];
            let ustar_size = parse_number(&block[124..136], at, "size")?;
            if self.extension_record(typeflag, ustar_size, &mut pending, at)? {
                continue;
            }
            let kind = entry_kind(typeflag, at)?;
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                return Err(TarError::new(
                    TarErrorKind::Limit,
                    at,
                    format!("more than {} entries", self.limits.max_entries),
                ));
            }
            let entry = self.build_entry(&block, kind, ustar_size, pending, at)?;
            if entry.kind.is_header_only() {
                self.remaining = 0;
                self.padding = 0;
            } else {
                self.remaining = entry.size;
                self.padding = pad(entry.size);
            }
            return Ok(Some(entry));
        }
    }

    /// After a zero block: the second one must follow, and no extended record may be left
    /// waiting for an entry. Marks the archive done.
    fn end_of_archive(
        &mut self,
        block: &mut [u8; BLOCK],
        pending: &Pending,
        at: u64,
    ) -> Result<(), TarError> {
        if !self.read_block(block)? {
            return Err(TarError::new(
                TarErrorKind::Truncated,
                at,
                "stream ended after a single end-of-archive block",
            ));
        }
        if block.iter().any(|&b| b != 0) {
            return Err(TarError::new(
                TarErrorKind::Header,
                at,
                "a zero block inside the archive",
            ));
        }
        if !pending.pax.is_empty() || pending.gnu_name.is_some() || pending.gnu_link.is_some() {
            return Err(TarError::new(
                TarErrorKind::Header,
                at,
                "extended header records with no entry after them",
            ));
        }
        self.done = true;
        Ok(())
    }

    /// Reads a PAX (`x`, `g`) or GNU long-name (`L`, `K`) record into `pending`: true when
    /// the header was one (the entry it describes comes next), false for an entry header.
    fn extension_record(
        &mut self,
        typeflag: u8,
        ustar_size: u64,
        pending: &mut Pending,
        at: u64,
    ) -> Result<bool, TarError> {
        match typeflag {
            b'x' => {
                pending.pax_bytes = pending.pax_bytes.saturating_add(ustar_size);
                if pending.pax_bytes > self.limits.max_record_bytes {
                    return Err(TarError::new(
                        TarErrorKind::Limit,
                        at,
                        format!(
                            "PAX records of {} bytes for one entry are over the {} byte limit",
                            pending.pax_bytes, self.limits.max_record_bytes
                        ),
                    ));
                }
                let rec = self.read_record(ustar_size, "PAX", at)?;
                let parsed = parse_pax(&rec, at)?;
                for (k, v) in parsed {
                    if !pending.pax_keys.insert(k.clone()) {
                        return Err(TarError::new(
                            TarErrorKind::Ambiguous,
                            at,
                            format!("PAX key {k:?} given twice for one entry"),
                        ));
                    }
                    pending.pax.push((k, v));
                }
                Ok(true)
            }
            b'g' => {
                // Global records are parsed for syntax and size, and otherwise ignored, as
                // containerd does: they must not change how later entries read.
                let rec = self.read_record(ustar_size, "PAX global", at)?;
                parse_pax(&rec, at)?;
                Ok(true)
            }
            b'L' | b'K' => {
                let rec = self.read_record(ustar_size, "GNU long name", at)?;
                let name = trim_nul(&rec).to_vec();
                let slot = if typeflag == b'L' {
                    &mut pending.gnu_name
                } else {
                    &mut pending.gnu_link
                };
                if slot.replace(name).is_some() {
                    return Err(TarError::new(
                        TarErrorKind::Ambiguous,
                        at,
                        "two GNU long-name records for one entry",
                    ));
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn build_entry(
        &self,
        block: &[u8; BLOCK],
        kind: EntryKind,
        ustar_size: u64,
        pending: Pending,
        at: u64,
    ) -> Result<TarEntry, TarError> {
        let is_ustar = &block[257..263] == b"ustar\0";
        let mut path = {
            let name = trim_nul(&block[0..100]);
            let prefix = if is_ustar {
                trim_nul(&block[345..500])
            } else {
                &[][..]
            };
            if prefix.is_empty() {
                name.to_vec()
            } else {
                let mut p = prefix.to_vec();
                p.push(b'/');
                p.extend_from_slice(name);
                p
            }
        };
        let mut link_name = trim_nul(&block[157..257]).to_vec();
        let mut size = ustar_size;
        let mut uid = parse_number(&block[108..116], at, "uid")?;
        let mut gid = parse_number(&block[116..124], at, "gid")?;
        let mut mtime = parse_number(&block[136..148], at, "mtime")? as i64;
        let mode = parse_number(&block[100..108], at, "mode")?;
        let dev_major = parse_number(&block[329..337], at, "devmajor").unwrap_or(0);
        let dev_minor = parse_number(&block[337..345], at, "devminor").unwrap_or(0);
        let mut xattrs = Vec::new();
        let pax_has = |key: &str| pending.pax.iter().any(|(k, _)| k == key);
        if pending.gnu_name.is_some() && pax_has("path") {
            return Err(TarError::new(
                TarErrorKind::Ambiguous,
                at,
                "a GNU long name and a PAX path for one entry",
            ));
        }
        if pending.gnu_link.is_some() && pax_has("linkpath") {
            return Err(TarError::new(
                TarErrorKind::Ambiguous,
                at,
                "a GNU long link name and a PAX linkpath for one entry",
            ));
        }
        if let Some(n) = pending.gnu_name {
            path = n;
        }
        if let Some(l) = pending.gnu_link {
            link_name = l;
        }
        for (k, v) in pending.pax {
            let num = |v: &[u8]| -> Result<u64, TarError> {
                std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| {
                        TarError::new(
                            TarErrorKind::Header,
                            at,
                            format!(
                                "PAX {k} value {:?} is not a non-negative integer",
                                String::from_utf8_lossy(v)
                            ),
                        )
                    })
            };
            match k.as_str() {
                "path" => path = v,
                "linkpath" => link_name = v,
                "size" => {
                    let s = num(&v)?;
                    if ustar_size != 0 && ustar_size != s {
                        return Err(TarError::new(
                            TarErrorKind::SizeMismatch,
                            at,
                            format!("PAX size {s} disagrees with the ustar size {ustar_size}"),
                        ));
                    }
                    size = s;
                }
                "uid" => uid = num(&v)?,
                "gid" => gid = num(&v)?,
                "mtime" => {
                    let s = String::from_utf8_lossy(&v).into_owned();
                    let whole = s.split('.').next().unwrap_or("");
                    mtime = whole.parse::<i64>().map_err(|_| {
                        TarError::new(
                            TarErrorKind::Header,
                            at,
                            format!("PAX mtime {s:?} is not a number"),
                        )
                    })?;
                }
                key if key.starts_with("SCHILY.xattr.") => {
                    xattrs.push((key["SCHILY.xattr.".len()..].to_owned(), v));
                }
                _ => {}
            }
        }
        if kind.is_header_only() && size != 0 {
            return Err(TarError::new(
                TarErrorKind::SizeMismatch,
                at,
                format!(
                    "{kind:?} entry declares {size} bytes of data; readers disagree on whether to skip them"
                ),
            ));
        }
        Ok(TarEntry {
            path,
            kind,
            size,
            link_name,
            mode: (mode & 0o7777) as u32,
            uid,
            gid,
            mtime,
            dev_major: u32::try_from(dev_major).unwrap_or(u32::MAX),
            dev_minor: u32::try_from(dev_minor).unwrap_or(u32::MAX),
            xattrs,
            offset: at,
        })
    }
}

fn pad(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

fn trim_nul(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(i) => &b[..i],
        None => b,
    }
}

fn check_checksum(block: &[u8; BLOCK], at: u64) -> Result<(), TarError> {
    let stored = parse_number(&block[148..156], at, "checksum")?;
    let mut unsigned: u64 = 0;
    let mut signed: i64 = 0;
    for (i, &b) in block.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += u64::from(b);
        signed += i64::from(b as i8);
    }
    if stored == unsigned || stored as i64 == signed {
        Ok(())
    } else {
        Err(TarError::new(
            TarErrorKind::Header,
            at,
            format!("header checksum {stored} does not match computed {unsigned}"),
        ))
    }
}

/// Octal (NUL/space padded) or base-256 numbers. Negative base-256 values are refused.
fn parse_number(field: &[u8], at: u64, what: &str) -> Result<u64, TarError> {
    if field.first().is_some_and(|&b| b & 0x80 != 0) {
        if field[0] == 0xff {
            return Err(TarError::new(
                TarErrorKind::Header,
                at,
                format!("negative base-256 {what}"),
            ));
        }
        let mut v: u64 = u64::from(field[0] & 0x7f);
        for &b in &field[1..] {
            v = v
                .checked_mul(256)
                .and_then(|v| v.checked_add(u64::from(b)))
                .ok_or_else(|| {
                    TarError::new(
                        TarErrorKind::Header,
                        at,
                        format!("base-256 {what} overflows"),
                    )
                })?;
        }
        return Ok(v);
    }
    let s = trim_nul(field);
    let s = std::str::from_utf8(s).map_err(|_| {
        TarError::new(
            TarErrorKind::Header,
            at,
            format!("{what} field is not ASCII"),
        )
    })?;
    let s = s.trim_matches(' ');
    if s.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(s, 8).map_err(|_| {
        TarError::new(
            TarErrorKind::Header,
            at,
            format!("{what} field {s:?} is not an octal number"),
        )
    })
}

/// PAX records: `<len> <key>=<value>\n`, where `len` counts the whole record.
fn parse_pax(data: &[u8], at: u64) -> Result<Vec<(String, Vec<u8>)>, TarError> {
    let bad = |m: &str| {
        TarError::new(
            TarErrorKind::Header,
            at,
            format!("malformed PAX record: {m}"),
        )
    };
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        // Some writers pad the record block with NULs.
        if rest.iter().all(|&b| b == 0) {
            break;
        }
        let sp = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| bad("no length"))?;
        let len: usize = std::str::from_utf8(&rest[..sp])
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("length is not a number"))?;
        if len <= sp + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            return Err(bad("length does not match the record"));
        }
        let kv = &rest[sp + 1..len - 1];
        let eq = kv
            .iter()
            .position(|&b| b == b'=')
            .ok_or_else(|| bad("no '='"))?;
        let key = std::str::from_utf8(&kv[..eq]).map_err(|_| bad("key is not UTF-8"))?;
        if key.is_empty() {
            return Err(bad("empty key"));
        }
        out.push((key.to_owned(), kv[eq + 1..].to_vec()));
        rest = &rest[len..];
    }
    Ok(out)
}

/// The entry type a header's typeflag names; sparse, volume and unknown types are refused.
fn entry_kind(typeflag: u8, at: u64) -> Result<EntryKind, TarError> {
    Ok(match typeflag {
        b'0' | 0 | b'7' => EntryKind::Regular,
        b'1' => EntryKind::HardLink,
        b'2' => EntryKind::Symlink,
        b'3' => EntryKind::CharDevice,
        b'4' => EntryKind::BlockDevice,
        b'5' => EntryKind::Directory,
        b'6' => EntryKind::Fifo,
        b'S' => {
            return Err(TarError::new(
                TarErrorKind::EntryType,
                at,
                "GNU sparse entries are not allowed in layers",
            ));
        }
        b'V' | b'M' | b'N' => {
            return Err(TarError::new(
                TarErrorKind::EntryType,
                at,
                format!(
                    "GNU typeflag {:?} (volume or multi-volume) is not allowed in layers",
                    typeflag as char
                ),
            ));
        }
        other => {
            return Err(TarError::new(
                TarErrorKind::EntryType,
                at,
                format!("unknown typeflag {other:#04x}"),
            ));
        }
    })
}
