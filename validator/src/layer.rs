//! Deep validation of one layer in one streaming pass.
//!
//! compressed bytes → [`VerifyingReader`] (blob digest and size) → decompressor chosen by the
//! media type and confirmed by magic bytes → [`DigestingReader`] (DiffID) → [`TarReader`] (every
//! header parsed, nothing extracted) → drained to the end, so trailing bytes count in the DiffID
//! and the compressed digest covers the whole blob. Memory stays bounded whatever the layer size.

use std::collections::HashSet;
use std::io::{self, BufRead, BufReader, Read};

use crate::digest::{Algorithm, Digest};
use crate::document::Descriptor;
use crate::media_type::Compression;
use crate::report::{Report, Rule};
use crate::tarstream::{EntryKind, TarEntry, TarError, TarErrorKind, TarLimits, TarReader};
use crate::verify::{DigestingReader, VerifyError, VerifyingReader};

/// Limits for deep layer validation.
#[derive(Debug, Clone)]
pub struct LayerLimits {
    /// Tar limits.
    pub tar: TarLimits,
    /// Largest uncompressed stream (gzip and zstd bombs stop here).
    pub max_uncompressed: u64,
    /// Largest zstd window, as a power of two.
    pub zstd_window_log_max: u32,
}

impl Default for LayerLimits {
    fn default() -> Self {
        LayerLimits {
            tar: TarLimits::default(),
            max_uncompressed: 64 << 30,
            zstd_window_log_max: 27,
        }
    }
}

/// What a layer turned out to be.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayerSummary {
    /// The digest of the uncompressed stream, when it decompressed to the end.
    pub diff_id: Option<Digest>,
    /// Bytes of uncompressed stream.
    pub uncompressed_size: u64,
    /// Tar entries read.
    pub entries: u64,
}

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

/// Tells the compression from the first bytes of a stream.
pub fn sniff_compression(head: &[u8]) -> Compression {
    if head.starts_with(GZIP_MAGIC) {
        Compression::Gzip
    } else if head.starts_with(ZSTD_MAGIC) {
        Compression::Zstd
    } else {
        Compression::None
    }
}

/// Counts bytes and fails past a limit.
struct Capped<R> {
    inner: R,
    count: u64,
    limit: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("uncompressed stream is larger than the limit of {0} bytes")]
struct OverLimit(u64);

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        if self.count > self.limit {
            return Err(io::Error::other(OverLimit(self.limit)));
        }
        Ok(n)
    }
}

/// The decompressor, keeping access to the compressed reader beneath it.
enum Decoder<R: BufRead> {
    Plain(R),
    Gzip(Box<flate2::bufread::MultiGzDecoder<R>>),
    Zstd(Box<zstd::stream::read::Decoder<'static, R>>),
}

impl<R: BufRead> Decoder<R> {
    fn new(inner: R, c: Compression, window_log_max: u32) -> io::Result<Self> {
        Ok(match c {
            Compression::None => Decoder::Plain(inner),
            Compression::Gzip => {
                Decoder::Gzip(Box::new(flate2::bufread::MultiGzDecoder::new(inner)))
            }
            Compression::Zstd => {
                let mut d = zstd::stream::read::Decoder::with_buffer(inner)?;
                d.window_log_max(window_log_max)?;
                Decoder::Zstd(Box::new(d))
            }
        })
    }

    fn into_inner(self) -> R {
        match self {
            Decoder::Plain(r) => r,
            Decoder::Gzip(d) => d.into_inner(),
            Decoder::Zstd(d) => d.finish(),
        }
    }
}

impl<R: BufRead> Read for Decoder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Decoder::Plain(r) => r.read(buf),
            Decoder::Gzip(d) => d.read(buf),
            Decoder::Zstd(d) => d.read(buf),
        }
    }
}

/// The uncompressed stream of a layer blob, for consumers that apply layers (the worker).
///
/// Checks that the magic bytes agree with `declared` (a `tar+gzip` blob holding zstd bytes, or
/// plain tar, is refused rather than guessed at), caps the zstd window at
/// `limits.zstd_window_log_max` and the output at `limits.max_uncompressed` (reads past it fail),
/// so a decompression bomb stops early. Gzip members are read until the blob ends, as
/// `check_layer` does.
pub fn decompress_layer<'a, R: BufRead + Send + 'a>(
    mut blob: R,
    declared: Compression,
    limits: &LayerLimits,
) -> io::Result<Box<dyn Read + Send + 'a>> {
    let sniffed = sniff_compression(blob.fill_buf()?);
    if sniffed != declared {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the media type says {declared}, the bytes are {sniffed}"),
        ));
    }
    let decoder = Decoder::new(blob, declared, limits.zstd_window_log_max)?;
    Ok(Box::new(Capped {
        inner: decoder,
        count: 0,
        limit: limits.max_uncompressed,
    }))
}

/// Classifies an I/O error from inside the reader stack.
fn io_rule(e: &io::Error) -> (Rule, String) {
    if let Some(v) = VerifyError::from_io(e) {
        let rule = match v {
            VerifyError::DigestMismatch { .. } => Rule::BlobDigest,
            _ => Rule::BlobSize,
        };
        return (rule, v.to_string());
    }
    if let Some(o) = e.get_ref().and_then(|x| x.downcast_ref::<OverLimit>()) {
        return (Rule::TarLimits, o.to_string());
    }
    (Rule::LayerDecompress, format!("does not decompress: {e}"))
}

fn tar_rule(e: &TarError) -> (Rule, String) {
    let rule = match e.kind {
        TarErrorKind::Header => Rule::TarHeader,
        TarErrorKind::EntryType => Rule::TarEntryType,
        TarErrorKind::Truncated => Rule::TarTruncated,
        TarErrorKind::SizeMismatch => Rule::TarPaxSize,
        TarErrorKind::Ambiguous => Rule::TarAmbiguousHeader,
        TarErrorKind::Limit => Rule::TarLimits,
        TarErrorKind::Io => {
            let src = e.source.as_ref().expect("io kind carries its source");
            return io_rule(src);
        }
    };
    (rule, e.to_string())
}

/// Checks one layer blob against its descriptor and, when given, its DiffID.
///
/// Findings go to `report` under `location`; the summary carries what was computed.
pub fn check_layer<R: Read>(
    blob: R,
    desc: &Descriptor,
    expected_diff_id: Option<&Digest>,
    limits: &LayerLimits,
    location: &str,
    report: &mut Report,
) -> LayerSummary {
    let mut summary = LayerSummary::default();
    let verifying = VerifyingReader::new(blob, desc.digest.clone(), desc.size);
    let mut buffered = BufReader::with_capacity(256 * 1024, verifying);
    let head = match buffered.fill_buf() {
        Ok(h) => h,
        Err(e) => {
            let (rule, msg) = io_rule(&e);
            report.error(rule, location, msg);
            return summary;
        }
    };
    let sniffed = sniff_compression(head);
    let Some(declared) = desc.media_type.layer_compression() else {
        report.error(
            Rule::LayerMediaType,
            location,
            format!(
                "{} is not a layer type that can be applied",
                desc.media_type
            ),
        );
        drain(buffered, location, report);
        return summary;
    };
    if sniffed != declared {
        report.error(
            Rule::LayerCompression,
            location,
            format!(
                "media type {} says {declared}, the bytes are {sniffed}",
                desc.media_type
            ),
        );
        drain(buffered, location, report);
        return summary;
    }
    let decoder = match Decoder::new(buffered, declared, limits.zstd_window_log_max) {
        Ok(d) => d,
        Err(e) => {
            report.error(
                Rule::LayerDecompress,
                location,
                format!("cannot start the {declared} decoder: {e}"),
            );
            return summary;
        }
    };
    let diff_alg = expected_diff_id.map_or(Algorithm::Sha256, Digest::algorithm);
    let capped = Capped {
        inner: decoder,
        count: 0,
        limit: limits.max_uncompressed,
    };
    let hashing = DigestingReader::new(capped, diff_alg);
    let mut tar = TarReader::new(hashing, limits.tar.clone());
    let mut paths = PathCheck::default();
    let tar_ok = loop {
        match tar.next_entry() {
            Ok(Some(entry)) => {
                summary.entries += 1;
                paths.check(&entry, &limits.tar, location, report);
            }
            Ok(None) => break true,
            Err(e) => {
                let (rule, msg) = tar_rule(&e);
                report.error(rule, location, msg);
                break false;
            }
        }
    };
    let mut hashing = tar.into_inner();
    if tar_ok {
        // Bytes after the end blocks belong to the DiffID too; zero padding to the record size
        // is normal, anything else is flagged.
        match trailing(&mut hashing) {
            Ok(0) => {}
            Ok(n) => report.warn(
                Rule::TarTrailingData,
                location,
                format!("{n} non-zero bytes after the tar end blocks"),
            ),
            Err(e) => {
                let (rule, msg) = io_rule(&e);
                report.error(rule, location, msg);
                let (capped, _, _) = hashing.finish();
                drain(capped.inner.into_inner(), location, report);
                return summary;
            }
        }
        let (capped, diff_id, size) = hashing.finish();
        summary.uncompressed_size = size;
        if let Some(expected) = expected_diff_id
            && &diff_id != expected
        {
            report.error(
                Rule::DiffId,
                location,
                format!("uncompressed digest {diff_id} differs from diff_id {expected}"),
            );
        }
        summary.diff_id = Some(diff_id);
        drain(capped.inner.into_inner(), location, report);
    } else {
        let (capped, _, _) = hashing.finish();
        drain(capped.inner.into_inner(), location, report);
    }
    summary
}

/// Reads the uncompressed stream to its end, counting non-zero bytes.
fn trailing(r: &mut impl Read) -> io::Result<u64> {
    let mut buf = [0u8; 8192];
    let mut nonzero = 0u64;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok(nonzero);
        }
        nonzero += buf[..n].iter().filter(|&&b| b != 0).count() as u64;
    }
}

/// Reads the compressed blob to its end so that size and digest are checked.
fn drain<R: Read>(mut r: R, location: &str, report: &mut Report) {
    if let Err(e) = io::copy(&mut r, &mut io::sink()) {
        let (rule, msg) = io_rule(&e);
        report.error(rule, location, msg);
    }
}

/// Per-layer path rules: safe names, no duplicates, sane whiteouts and hard links.
#[derive(Default)]
struct PathCheck {
    seen: HashSet<Vec<u8>>,
}

/// Normalises a tar name: `./a//b/` → `a/b`. `Err` names why the name is unsafe.
pub fn normalize_entry_path(raw: &[u8]) -> Result<Vec<u8>, &'static str> {
    if raw.is_empty() {
        return Err("empty name");
    }
    if raw.contains(&0) {
        return Err("NUL byte in name");
    }
    if raw[0] == b'/' {
        return Err("absolute name");
    }
    let mut out: Vec<u8> = Vec::with_capacity(raw.len());
    for comp in raw.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => return Err("'..' in name"),
            c => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(c);
            }
        }
    }
    Ok(out)
}

impl PathCheck {
    fn check(&mut self, e: &TarEntry, limits: &TarLimits, location: &str, r: &mut Report) {
        let shown = String::from_utf8_lossy(&e.path);
        let at = format!("{location} entry {shown:?} (tar offset {})", e.offset);
        let path = match normalize_entry_path(&e.path) {
            Ok(p) => p,
            Err(why) => {
                r.error(Rule::TarUnsafePath, at, why);
                return;
            }
        };
        if path.is_empty() && e.kind != EntryKind::Directory {
            r.error(
                Rule::TarUnsafePath,
                at,
                format!(
                    "a {:?} entry would replace the root (CVE-2021-29136)",
                    e.kind
                ),
            );
            return;
        }
        if path.len() > limits.max_path_len {
            r.error(
                Rule::TarLimits,
                &at,
                format!(
                    "path is {} bytes, limit {}",
                    path.len(),
                    limits.max_path_len
                ),
            );
        }
        if let Some(c) = path
            .split(|&b| b == b'/')
            .find(|c| c.len() > limits.max_component_len)
        {
            r.error(
                Rule::TarLimits,
                &at,
                format!(
                    "a path component is {} bytes, limit {}",
                    c.len(),
                    limits.max_component_len
                ),
            );
        }
        let base = path.rsplit(|&b| b == b'/').next().unwrap_or(&[]);
        if let Some(rest) = base.strip_prefix(b".wh.") {
            if rest.is_empty() || rest == b"." || rest == b".." {
                r.error(Rule::TarWhiteout, &at, "a whiteout must name an entry");
            } else if let Some(meta) = rest.strip_prefix(b".wh.")
                && meta != b".opq"
            {
                r.error(
                    Rule::TarWhiteout,
                    &at,
                    "only .wh..wh..opq is a defined whiteout meta name",
                );
            }
        }
        if e.kind == EntryKind::HardLink {
            match normalize_entry_path(&e.link_name) {
                Ok(t) if t.is_empty() => r.error(Rule::TarHardlink, &at, "hard link to the root"),
                Ok(_) => {}
                Err(why) => r.error(
                    Rule::TarHardlink,
                    &at,
                    format!(
                        "hard link target {:?}: {why}",
                        String::from_utf8_lossy(&e.link_name)
                    ),
                ),
            }
        }
        if e.uid >= 1 << 31 || e.gid >= 1 << 31 {
            r.error(
                Rule::TarHeader,
                &at,
                format!("uid {} / gid {} not below 2^31", e.uid, e.gid),
            );
        }
        if !self.seen.insert(path) {
            r.error(
                Rule::TarDuplicatePath,
                at,
                "the same path appears twice in this layer",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn decompress_layer_checks_magic_and_caps_output() {
        let data = vec![7u8; 100_000];
        let limits = LayerLimits::default();
        let mut out = Vec::new();
        decompress_layer(&gzip(&data)[..], Compression::Gzip, &limits)
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, data);
        let z = zstd::encode_all(&data[..], 3).unwrap();
        out.clear();
        decompress_layer(&z[..], Compression::Zstd, &limits)
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, data);
        // Labels that disagree with the bytes are refused before decoding.
        let e = decompress_layer(&z[..], Compression::Gzip, &limits)
            .err()
            .unwrap();
        assert!(e.to_string().contains("the bytes are zstd"), "{e}");
        let e = decompress_layer(&data[..], Compression::Gzip, &limits)
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // Output past the cap fails instead of growing.
        let small = LayerLimits {
            max_uncompressed: 1000,
            ..LayerLimits::default()
        };
        let e = decompress_layer(&gzip(&data)[..], Compression::Gzip, &small)
            .unwrap()
            .read_to_end(&mut Vec::new())
            .unwrap_err();
        assert!(
            e.to_string().contains("larger than the limit of 1000"),
            "{e}"
        );
    }
}
