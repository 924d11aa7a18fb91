//! A deterministic tar writer for layers, and the compressed, hashed output behind it.
//!
//! Headers are built by hand from package metadata, not from the build machine's file system:
//! POSIX ustar headers with PAX extended records only where ustar cannot hold a value (long
//! or non-ASCII paths and link targets, large ids and sizes), no atime/ctime, integer-second
//! mtimes, numeric owners plus their names. The tar crate's own deterministic mode forces
//! 0644/0755 modes, which would drop setuid bits and private modes of an OS image.

use std::io::{self, Write};

use validator::{Algorithm, Digest, Digester};

use crate::imagefile::{Compression, CompressionAlg};
use crate::pargz::ParGzEncoder;

const BLOCK: usize = 512;
/// Largest value an 11-digit octal size or mtime field holds.
const MAX_OCTAL_11: u64 = 0o77777777777;
/// Largest value a 7-digit octal uid or gid field holds.
const MAX_OCTAL_7: u64 = 0o7777777;

/// Ownership and time of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Meta {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub uname: String,
    pub gname: String,
    pub mtime: u64,
}

/// What kind of entry a header starts.
pub(crate) enum Kind<'a> {
    Dir,
    File { size: u64 },
    Symlink { target: &'a str },
    Hardlink { target: &'a str },
}

/// Writes tar entries to `W`. Entries must be given in the order they should appear.
pub(crate) struct TarWriter<W: Write> {
    out: W,
}

fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    // "LEN key=value\n", where LEN counts its own digits.
    let body = key.len() + value.len() + 3; // ' ', '=', '\n'
    let mut len = body + 1;
    while len != body + len.to_string().len() {
        len = body + len.to_string().len();
    }
    let mut r = format!("{len} {key}=").into_bytes();
    r.extend_from_slice(value);
    r.push(b'\n');
    r
}

/// Splits `path` into ustar's prefix (≤155 bytes) and name (≤100 bytes) at a `/`, or `None`
/// when it cannot be split that way or is not ASCII.
fn ustar_split(path: &str) -> Option<(&str, &str)> {
    if !path.is_ascii() {
        return None;
    }
    if path.len() <= 100 {
        return Some(("", path));
    }
    let min = path.len().saturating_sub(101);
    path.char_indices()
        .filter(|&(i, c)| c == '/' && i >= min && i <= 155)
        .map(|(i, _)| (&path[..i], &path[i + 1..]))
        .find(|(p, n)| p.len() <= 155 && n.len() <= 100 && !n.is_empty())
}

fn octal(field: &mut [u8], value: u64) {
    let s = format!("{:0width$o}", value, width = field.len() - 1);
    field[..s.len()].copy_from_slice(s.as_bytes());
    field[s.len()] = 0;
}

impl<W: Write> TarWriter<W> {
    pub(crate) fn new(out: W) -> Self {
        TarWriter { out }
    }

    /// The underlying writer, for streaming a file's content after [`TarWriter::header`].
    pub(crate) fn inner(&mut self) -> &mut W {
        &mut self.out
    }

    /// Writes the header (and any PAX record) of one entry. `path` has no leading `/`;
    /// directories get a trailing `/`.
    pub(crate) fn header(&mut self, path: &str, kind: Kind<'_>, meta: &Meta) -> io::Result<()> {
        let path = match kind {
            Kind::Dir => format!("{}/", path.trim_end_matches('/')),
            _ => path.to_owned(),
        };
        let (typeflag, size, link) = match kind {
            Kind::Dir => (b'5', 0, None),
            Kind::File { size } => (b'0', size, None),
            Kind::Symlink { target } => (b'2', 0, Some(target)),
            Kind::Hardlink { target } => (b'1', 0, Some(target)),
        };
        let mut pax: Vec<u8> = Vec::new();
        let split = ustar_split(&path);
        if split.is_none() {
            pax.extend(pax_record("path", path.as_bytes()));
        }
        if let Some(l) = link
            && (l.len() > 100 || !l.is_ascii())
        {
            pax.extend(pax_record("linkpath", l.as_bytes()));
        }
        if size > MAX_OCTAL_11 {
            pax.extend(pax_record("size", size.to_string().as_bytes()));
        }
        if u64::from(meta.uid) > MAX_OCTAL_7 {
            pax.extend(pax_record("uid", meta.uid.to_string().as_bytes()));
        }
        if u64::from(meta.gid) > MAX_OCTAL_7 {
            pax.extend(pax_record("gid", meta.gid.to_string().as_bytes()));
        }
        if meta.mtime > MAX_OCTAL_11 {
            pax.extend(pax_record("mtime", meta.mtime.to_string().as_bytes()));
        }
        if meta.uname.len() > 31 || !meta.uname.is_ascii() {
            pax.extend(pax_record("uname", meta.uname.as_bytes()));
        }
        if meta.gname.len() > 31 || !meta.gname.is_ascii() {
            pax.extend(pax_record("gname", meta.gname.as_bytes()));
        }
        if !pax.is_empty() {
            let pax_meta = Meta {
                mode: 0o644,
                uid: 0,
                gid: 0,
                uname: String::new(),
                gname: String::new(),
                mtime: meta.mtime.min(MAX_OCTAL_11),
            };
            let block = raw_header(
                "././@PaxHeader",
                "",
                b'x',
                pax.len() as u64,
                None,
                &pax_meta,
            );
            self.out.write_all(&block)?;
            self.out.write_all(&pax)?;
            self.pad(pax.len() as u64)?;
        }
        let (prefix, name) = split.unwrap_or(("", truncate(&path, 100)));
        let link = link.map(|l| truncate(l, 100));
        let short = Meta {
            uid: meta.uid.min(MAX_OCTAL_7 as u32),
            gid: meta.gid.min(MAX_OCTAL_7 as u32),
            mtime: meta.mtime.min(MAX_OCTAL_11),
            uname: truncate(&meta.uname, 31).to_owned(),
            gname: truncate(&meta.gname, 31).to_owned(),
            mode: meta.mode,
        };
        let block = raw_header(name, prefix, typeflag, size.min(MAX_OCTAL_11), link, &short);
        self.out.write_all(&block)
    }

    /// Pads file content of `size` bytes to the block size.
    pub(crate) fn pad(&mut self, size: u64) -> io::Result<()> {
        let rem = (size % BLOCK as u64) as usize;
        if rem != 0 {
            self.out.write_all(&[0u8; BLOCK][..BLOCK - rem])?;
        }
        Ok(())
    }

    /// A whole file from bytes in memory (small generated files only).
    pub(crate) fn file_bytes(&mut self, path: &str, meta: &Meta, data: &[u8]) -> io::Result<()> {
        self.header(
            path,
            Kind::File {
                size: data.len() as u64,
            },
            meta,
        )?;
        self.out.write_all(data)?;
        self.pad(data.len() as u64)
    }

    /// Ends the archive (two zero blocks) and returns the writer.
    pub(crate) fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[0u8; 2 * BLOCK])?;
        Ok(self.out)
    }
}

/// The longest prefix of `s` of at most `max` bytes ending at a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn raw_header(
    name: &str,
    prefix: &str,
    typeflag: u8,
    size: u64,
    link: Option<&str>,
    meta: &Meta,
) -> [u8; BLOCK] {
    let mut h = [0u8; BLOCK];
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], u64::from(meta.mode & 0o7777));
    octal(&mut h[108..116], u64::from(meta.uid));
    octal(&mut h[116..124], u64::from(meta.gid));
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], meta.mtime);
    h[156] = typeflag;
    if let Some(l) = link {
        h[157..157 + l.len()].copy_from_slice(l.as_bytes());
    }
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[265..265 + meta.uname.len()].copy_from_slice(meta.uname.as_bytes());
    h[297..297 + meta.gname.len()].copy_from_slice(meta.gname.as_bytes());
    octal(&mut h[329..337], 0);
    octal(&mut h[337..345], 0);
    h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
    // Checksum: the header's byte sum with the checksum field read as spaces.
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

enum Encoder<W: Write> {
    Gzip(ParGzEncoder<W>),
    Zstd(zstd::stream::write::Encoder<'static, W>),
}

impl<W: Write> Write for Encoder<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Encoder::Gzip(e) => e.write(buf),
            Encoder::Zstd(e) => e.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Encoder::Gzip(e) => e.flush(),
            Encoder::Zstd(e) => e.flush(),
        }
    }
}

/// The parameters a zstd layer's bytes depend on besides the level (zstd's multi-threaded
/// mode splits the input into jobs of `job_size` bytes, each compressed with an overlap of
/// the previous job's last window / 2^(9 − `overlap_log`) bytes; the worker count and timing
/// do not matter). The values are libzstd 1.5.7's defaults for a stream of unknown size:
/// the window log of the level (`ZSTD_defaultCParameters`, sources over 256 KB), jobs of
/// 4 windows but at least 1 MiB (`ZSTDMT_computeTargetJobLog`), and the overlap of the
/// level's strategy (`ZSTDMT_overlapLog_default`). Changing any of them changes zstd layers
/// (and needs a new layer-cache format).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ZstdPins {
    pub window_log: u32,
    pub job_size: u32,
    pub overlap_log: u32,
}

impl ZstdPins {
    /// The pins for a level from 1 to 19 (others are clamped to that range).
    pub(crate) fn for_level(level: i32) -> ZstdPins {
        let level = level.clamp(1, 19);
        let window_log = match level {
            1 => 19,
            2 => 20,
            3..=8 => 21,
            9..=16 => 22,
            _ => 23,
        };
        // Strategy by level: fast 1–2, dfast 3–4, greedy 5, lazy 6–7 (overlap 6); lazy2 8–12,
        // btlazy2 13–15 (7); btopt 16–17, btultra 18 (8); btultra2 19 (9).
        let overlap_log = match level {
            1..=7 => 6,
            8..=15 => 7,
            16..=18 => 8,
            _ => 9,
        };
        ZstdPins {
            window_log,
            job_size: 1 << (window_log + 2).max(20),
            overlap_log,
        }
    }
}

/// The stack behind a layer's tar stream: DiffID hashing, then compression into `W`. The
/// compressed bytes are hashed by whoever stores them (a layout's
/// [`validator::BlobWriter`]), so they are hashed once.
///
/// A gzip layer is a sequence of gzip members (RFC 1952 §2.2: "a gzip file consists of a
/// series of members"). Bytes written with `Write` (tar headers, padding, generated files,
/// payload content that cannot be spliced) are deflated into members of our own
/// ([`ParGzEncoder`]); a payload's stored gzip member is spliced in as a member of its own
/// ([`LayerStream::begin_spliced`]): a fixed header, the payload's raw deflate data as
/// published, and its trailer, whose CRC-32 and ISIZE stay valid because the content is the
/// same. Why members and not one deflate stream (zlib's `gzjoin`): joining raw deflate data
/// into one stream means finding the payload's last block, clearing its final bit and
/// realigning every following bit (or closing each piece with an empty stored block), which
/// needs the payload inflated at the bit level on the way through; separate members need
/// nothing but the byte offsets of the deflate data, which the verifying inflate hands out
/// anyway, and every gzip reader we ship to reads them (flate2's `MultiGzDecoder`, Go's
/// `compress/gzip` and klauspost's `pgzip` in multistream mode, their default; GNU gzip). The
/// price is 18 bytes of header and trailer per member and a fresh window for each run of
/// tar headers.
pub(crate) struct LayerStream<W: Write> {
    enc: Encoder<W>,
    diff_id: Digester,
}

/// The header of every spliced member: deflate, no flags, mtime 0, no extra flags, OS
/// "unknown", whatever the payload's own header said (name, time, OS of the publisher).
const SPLICED_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];

/// A layer's digests: what a finished layer stream and its blob produced.
#[derive(Debug, Clone)]
pub(crate) struct LayerDigests {
    pub diff_id: Digest,
    pub digest: Digest,
    pub size: u64,
}

impl<W: Write> LayerStream<W> {
    /// `threads` compression workers (gzip and zstd; the output does not depend on it).
    pub(crate) fn new(out: W, compression: Compression, threads: u32) -> io::Result<Self> {
        let enc = match compression.algorithm {
            // Blocks deflated in parallel, same bytes for any thread count (see pargz).
            CompressionAlg::Gzip => Encoder::Gzip(ParGzEncoder::new(
                out,
                compression.level.clamp(0, 9) as u32,
                threads,
            )),
            CompressionAlg::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(out, compression.level)?;
                // Checksums and sizes fixed so frames depend only on the content.
                e.include_checksum(false)?;
                e.include_contentsize(false)?;
                // Always zstd's multi-threaded mode, even with one worker: its output does
                // not depend on the number of workers, but differs from the single-threaded
                // mode's, so the mode is pinned and only the worker count follows the machine.
                e.multithread(threads.max(1))?;
                // What the multi-threaded output does depend on, pinned to the values
                // libzstd 1.5.7 derives from the level, so a library with other defaults
                // writes the same layers.
                let pins = ZstdPins::for_level(compression.level);
                e.set_parameter(zstd::stream::raw::CParameter::WindowLog(pins.window_log))?;
                e.set_parameter(zstd::stream::raw::CParameter::JobSize(pins.job_size))?;
                e.set_parameter(zstd::stream::raw::CParameter::OverlapSizeLog(
                    pins.overlap_log,
                ))?;
                Encoder::Zstd(e)
            }
        };
        Ok(LayerStream {
            enc,
            diff_id: Digester::new(Algorithm::Sha256),
        })
    }

    /// Starts a spliced gzip member: ends our own member and writes the fixed header. Returns
    /// `false` (and does nothing) when the layer is not gzip: the content then goes through
    /// `Write` as usual. Between this and [`LayerStream::end_spliced`], only
    /// [`LayerStream::spliced_deflated`] and [`LayerStream::spliced_content`] may be called.
    pub(crate) fn begin_spliced(&mut self) -> io::Result<bool> {
        match &mut self.enc {
            Encoder::Gzip(e) => {
                e.write_raw(&SPLICED_HEADER)?;
                Ok(true)
            }
            Encoder::Zstd(_) => Ok(false),
        }
    }

    /// Raw deflate data of the spliced member, written as it is.
    pub(crate) fn spliced_deflated(&mut self, data: &[u8]) -> io::Result<()> {
        match &mut self.enc {
            Encoder::Gzip(e) => e.write_raw(data),
            Encoder::Zstd(_) => Err(io::Error::other("no spliced member in a zstd layer")),
        }
    }

    /// The spliced member's content: part of the tar stream, so it counts for the DiffID,
    /// but it is not compressed again.
    pub(crate) fn spliced_content(&mut self, data: &[u8]) {
        self.diff_id.update(data);
    }

    /// Ends the spliced member with its trailer (CRC-32 and ISIZE of its content).
    pub(crate) fn end_spliced(&mut self, trailer: [u8; 8]) -> io::Result<()> {
        self.spliced_deflated(&trailer)
    }

    /// Flushes the compressor and returns the DiffID and the underlying writer.
    pub(crate) fn finish(self) -> io::Result<(Digest, W)> {
        let out = match self.enc {
            Encoder::Gzip(e) => e.finish()?,
            Encoder::Zstd(e) => e.finish()?,
        };
        Ok((self.diff_id.finish(), out))
    }
}

impl<W: Write> Write for LayerStream<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.enc.write(buf)?;
        self.diff_id.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.enc.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn meta() -> Meta {
        Meta {
            mode: 0o4555,
            uid: 0,
            gid: 2,
            uname: "root".into(),
            gname: "bin".into(),
            mtime: 1_700_000_000,
        }
    }

    #[test]
    fn pax_record_length_counts_itself() {
        let r = pax_record("path", b"a");
        assert_eq!(r, b"9 path=a\n");
        let long = vec![b'x'; 95];
        let r = pax_record("path", &long);
        assert_eq!(r.len(), 105);
        assert!(r.starts_with(b"105 path="));
    }

    #[test]
    fn headers_read_back_with_the_tar_crate() {
        let long = format!("usr/{}/file", "d".repeat(180));
        let mut w = TarWriter::new(Vec::new());
        w.header("usr", Kind::Dir, &meta()).unwrap();
        w.file_bytes("usr/bin/su", &meta(), b"hello").unwrap();
        w.header(
            "usr/bin/sh",
            Kind::Symlink {
                target: "../../sbin/sh",
            },
            &meta(),
        )
        .unwrap();
        w.header(
            "usr/bin/su2",
            Kind::Hardlink {
                target: "usr/bin/su",
            },
            &meta(),
        )
        .unwrap();
        w.file_bytes(&long, &meta(), b"").unwrap();
        w.file_bytes("usr/ünï", &meta(), b"x").unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(bytes.len() % 512, 0);

        let mut ar = tar::Archive::new(&bytes[..]);
        let got: Vec<(String, u8, u32, u64, u64, Option<String>)> = ar
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().display().to_string(),
                    h.entry_type().as_byte(),
                    h.mode().unwrap(),
                    h.gid().unwrap(),
                    h.mtime().unwrap(),
                    e.link_name().unwrap().map(|l| l.display().to_string()),
                )
            })
            .collect();
        let t = 1_700_000_000;
        assert_eq!(
            got,
            vec![
                ("usr/".into(), b'5', 0o4555, 2, t, None),
                ("usr/bin/su".into(), b'0', 0o4555, 2, t, None),
                (
                    "usr/bin/sh".into(),
                    b'2',
                    0o4555,
                    2,
                    t,
                    Some("../../sbin/sh".into())
                ),
                (
                    "usr/bin/su2".into(),
                    b'1',
                    0o4555,
                    2,
                    t,
                    Some("usr/bin/su".into())
                ),
                (long.clone(), b'0', 0o4555, 2, t, None),
                ("usr/ünï".into(), b'0', 0o4555, 2, t, None),
            ]
        );
        // Our own validator's strict parser accepts the archive too.
        let desc = validator::Descriptor {
            media_type: validator::MediaType::OciLayerTar,
            digest: Digest::sha256(&bytes),
            size: bytes.len() as u64,
            platform: None,
            annotations: Default::default(),
            artifact_type: None,
            data: None,
            urls: Vec::new(),
        };
        let mut report = validator::Report::new();
        let summary = validator::check_layer(
            &bytes[..],
            &desc,
            None,
            &validator::LayerLimits::default(),
            "layer",
            &mut report,
        );
        assert!(report.is_ok(), "{report:?}");
        assert_eq!(summary.entries, 6);
    }

    /// A payload stored the way pkg stores it: one gzip member at level 9.
    fn stored_payload(content: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(content).unwrap();
        e.finish().unwrap()
    }

    /// Writes `files` as a tar into a gzip layer, splicing each payload's deflate data.
    fn spliced_layer(files: &[(&str, Vec<u8>)], threads: u32) -> (Digest, Vec<u8>, Vec<u8>) {
        let mut tar = TarWriter::new(
            LayerStream::new(
                Vec::new(),
                Compression {
                    algorithm: CompressionAlg::Gzip,
                    level: 6,
                },
                threads,
            )
            .unwrap(),
        );
        let mut plain = TarWriter::new(Vec::new());
        for (path, content) in files {
            let size = content.len() as u64;
            tar.header(path, Kind::File { size }, &meta()).unwrap();
            plain.header(path, Kind::File { size }, &meta()).unwrap();
            plain.inner().write_all(content).unwrap();
            // What the build's sink does with a payload's one member.
            let stored = stored_payload(content);
            let s = tar.inner();
            assert!(s.begin_spliced().unwrap());
            s.spliced_deflated(&stored[10..stored.len() - 8]).unwrap();
            s.spliced_content(content);
            s.end_spliced(stored[stored.len() - 8..].try_into().unwrap())
                .unwrap();
            tar.pad(size).unwrap();
            plain.pad(size).unwrap();
        }
        let (diff_id, bytes) = tar.finish().unwrap().finish().unwrap();
        (diff_id, bytes, plain.finish().unwrap())
    }

    #[test]
    fn spliced_payloads_make_a_valid_reproducible_layer() {
        let text: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("{}\n", i % 4099).into_bytes())
            .collect();
        let files = vec![
            ("a/empty", Vec::new()),
            ("a/text", text.clone()),
            ("a/short", b"hello".to_vec()),
        ];
        let (diff_id, bytes, tar) = spliced_layer(&files, 1);
        let (_, four, _) = spliced_layer(&files, 4);
        assert!(bytes == four, "output independent of threads");
        assert_eq!(diff_id, Digest::sha256(&tar));
        // The payloads' deflate data is in the layer as it was stored.
        let body = stored_payload(&text);
        let body = &body[10..body.len() - 8];
        assert!(bytes.windows(body.len()).any(|w| w == body));
        let mut got = Vec::new();
        flate2::read::MultiGzDecoder::new(&bytes[..])
            .read_to_end(&mut got)
            .unwrap();
        assert!(got == tar);
        // Our validator reads every member and agrees on the DiffID.
        let desc = validator::Descriptor {
            media_type: validator::MediaType::OciLayerGzip,
            digest: Digest::sha256(&bytes),
            size: bytes.len() as u64,
            platform: None,
            annotations: Default::default(),
            artifact_type: None,
            data: None,
            urls: Vec::new(),
        };
        let mut report = validator::Report::new();
        let summary = validator::check_layer(
            &bytes[..],
            &desc,
            Some(&diff_id),
            &validator::LayerLimits::default(),
            "layer",
            &mut report,
        );
        assert!(report.is_ok(), "{report:?}");
        assert_eq!(summary.entries, 3);
    }

    #[test]
    fn zstd_pins_are_libzstds_defaults_at_every_level() {
        // One job's worth of data: what the window log changes (the frame header's window
        // size and the matches); jobs and overlaps are covered at level 3 below.
        let data: Vec<u8> = (0..20_000u32)
            .flat_map(|i| format!("{} ", i.wrapping_mul(2_654_435_761) % 5003).into_bytes())
            .collect();
        // The first and last level of each window log.
        for level in [1, 2, 3, 8, 9, 16, 17, 19] {
            let run = |pinned: bool| {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), level).unwrap();
                e.include_checksum(false).unwrap();
                e.include_contentsize(false).unwrap();
                e.multithread(1).unwrap();
                if pinned {
                    let p = ZstdPins::for_level(level);
                    use zstd::stream::raw::CParameter as P;
                    e.set_parameter(P::WindowLog(p.window_log)).unwrap();
                    e.set_parameter(P::JobSize(p.job_size)).unwrap();
                    e.set_parameter(P::OverlapSizeLog(p.overlap_log)).unwrap();
                }
                e.write_all(&data).unwrap();
                e.finish().unwrap()
            };
            assert!(run(true) == run(false), "level {level}");
        }
    }

    #[test]
    fn compressed_streams_are_stable() {
        for alg in [CompressionAlg::Gzip, CompressionAlg::Zstd] {
            // Varied content, larger than zstd's multi-threaded job size, so several
            // workers really split it.
            let data: Vec<u8> = (0..24_000_000u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8 & 0x3f)
                .collect();
            let run = |threads| {
                let mut s = LayerStream::new(
                    Vec::new(),
                    Compression {
                        algorithm: alg,
                        level: 3,
                    },
                    threads,
                )
                .unwrap();
                s.write_all(&data).unwrap();
                s.finish().unwrap()
            };
            let (diff_id, bytes) = run(1);
            let (_, four) = run(4);
            assert!(bytes == four, "{alg:?}: output independent of threads");
            if alg == CompressionAlg::Zstd {
                // The pins are libzstd's own defaults: pinning them changed no layer.
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
                e.include_checksum(false).unwrap();
                e.include_contentsize(false).unwrap();
                e.multithread(2).unwrap();
                e.write_all(&data).unwrap();
                assert!(e.finish().unwrap() == bytes, "zstd pins are the defaults");
            }
            assert_eq!(diff_id, Digest::sha256(&data));
            if alg == CompressionAlg::Gzip {
                // Fixed header: magic, deflate, no flags, mtime 0, OS 255.
                assert_eq!(&bytes[..4], &[0x1f, 0x8b, 8, 0]);
                assert_eq!(&bytes[4..8], &[0, 0, 0, 0]);
                assert_eq!(bytes[9], 255);
            }
        }
    }
}
