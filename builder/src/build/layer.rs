//! Writing one layer: the tar stream of its entries, payloads spliced from the package
//! repository's gzip members where they can be, compressed into the layout's ingest.

use super::*;

/// Passes writes through and reports their sizes to the build's progress.
pub(super) struct Reporting<'p, W> {
    inner: W,
    progress: Option<&'p dyn Progress>,
}

impl<W: Write> Write for Reporting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        if let Some(p) = self.progress {
            p.layer_bytes(n as u64);
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// What every layer of one build is written with.
#[derive(Clone, Copy)]
pub(super) struct LayerContext<'a> {
    pub(super) layout: &'a ImageLayout,
    pub(super) staging: &'a Path,
    pub(super) tree: &'a Tree,
    pub(super) packages: &'a [Package<'a>],
    pub(super) image: &'a ImageFile,
    pub(super) threads: u32,
    pub(super) progress: Option<&'a dyn Progress>,
}

/// Writes one layer holding the entries `in_layer` of the tree into the layout and returns
/// its digests. The compressed stream goes straight into the layout's ingest, which hashes
/// it on the way to disk: the blob is written once and never read back here.
pub(super) fn write_layer(
    cx: &LayerContext<'_>,
    in_layer: &BTreeSet<&str>,
) -> Result<(LayerDigests, StagedBlob), BuildError> {
    let LayerContext {
        layout,
        staging,
        tree,
        packages,
        image,
        threads,
        progress,
    } = *cx;
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |source| BuildError::Io { path, source }
    };
    let blob = layout
        .blobs()
        .ingest_unnamed(Algorithm::Sha256)
        .map_err(LayoutError::from)?;
    let stream = LayerStream::new(
        BufWriter::with_capacity(1 << 20, blob),
        image.compression,
        threads,
    )
    .map_err(io_err(layout.root()))?;
    let mut tar = TarWriter::new(Reporting {
        inner: stream,
        progress,
    });

    let tp = layout.root().to_owned();
    // The files whose content is a payload, in tar order: read ahead by worker threads while
    // this thread writes the tar (see `pipeline`).
    let payload_of = |path: &str| -> Option<&crate::compose::Node> {
        match &tree[path].content {
            Content::Payload { .. } => Some(&tree[path]),
            // The file it links to is in another layer: a tar hard link cannot reach it, so
            // this layer carries its own copy.
            Content::Hardlink(t) if !in_layer.contains(t.as_str()) => {
                let target = &tree[t.as_str()];
                matches!(target.content, Content::Payload { .. }).then_some(target)
            }
            _ => None,
        }
    };
    let nodes: Vec<(&str, &crate::compose::Node)> = in_layer
        .iter()
        .filter_map(|p| payload_of(p).map(|n| (*p, n)))
        .collect();
    let gzip = image.compression.algorithm == CompressionAlg::Gzip;
    std::thread::scope(|scope| {
        let payloads = Payloads::start(scope, nodes, packages, staging, threads as usize, gzip);
        for path in in_layer {
            let node = &tree[*path];
            if let Some(file) = payload_of(path) {
                let pieces = payloads.next().ok_or_else(|| BuildError::Io {
                    path: staging.to_owned(),
                    source: std::io::Error::other("a payload reader thread stopped"),
                })?;
                write_payload(&mut tar, path, file, pieces, payloads.pool(), staging)?;
                continue;
            }
            match &node.content {
                Content::Dir => tar.header(path, Kind::Dir, &node.meta),
                Content::Symlink(t) => tar.header(path, Kind::Symlink { target: t }, &node.meta),
                Content::Bytes(b) => tar.file_bytes(path, &node.meta, b),
                Content::Hardlink(t) if in_layer.contains(t.as_str()) => {
                    tar.header(path, Kind::Hardlink { target: t }, &node.meta)
                }
                // A copy of a generated file linked from another layer.
                Content::Hardlink(t) => match &tree[t.as_str()] {
                    target @ crate::compose::Node {
                        content: Content::Bytes(b),
                        ..
                    } => tar.file_bytes(path, &target.meta, b),
                    _ => unreachable!("a hard link's target is a file"),
                },
                Content::Payload { .. } => unreachable!("payloads are read ahead"),
            }
            .map_err(io_err(&tp))?;
        }
        Ok::<_, BuildError>(())
    })?;
    let stream = tar.finish().map_err(io_err(&tp))?.inner;
    let (diff_id, out) = stream.finish().map_err(io_err(&tp))?;
    let blob = out.into_inner().map_err(|e| BuildError::Io {
        path: tp.clone(),
        source: e.into_error(),
    })?;
    let blob = blob.finish().map_err(LayoutError::from)?;
    Ok((
        LayerDigests {
            diff_id,
            digest: blob.digest().clone(),
            size: blob.size(),
        },
        blob,
    ))
}

/// Appends one payload file to the tar from the pieces its worker reads (see `pipeline`):
/// header from `pkg.size`, then the payload as the repository verifies it (gunzip → hash
/// check, its stored deflate data spliced into a gzip layer, see [`Splice`]), then padding.
/// Without `pkg.size` the worker spooled the content to a temporary file to learn its size,
/// and it is deflated again.
pub(super) fn write_payload<W: Write>(
    tar: &mut TarWriter<Reporting<'_, LayerStream<W>>>,
    path: &str,
    node: &crate::compose::Node,
    pieces: Receiver<Piece>,
    pool: &Pool,
    staging: &Path,
) -> Result<(), BuildError> {
    let Content::Payload { action, .. } = &node.content else {
        unreachable!("write_payload is called for payload files only");
    };
    let io_err = |source| BuildError::Io {
        path: staging.to_owned(),
        source,
    };
    // A worker that died without its last piece (a panic, which the thread scope reports).
    let vanished = || BuildError::Io {
        path: staging.to_owned(),
        source: std::io::Error::other("a payload reader thread stopped"),
    };
    match action.get("pkg.size").and_then(|s| s.parse::<u64>().ok()) {
        Some(size) => {
            tar.header(path, Kind::File { size }, &node.meta)
                .map_err(io_err)?;
            let mut sink = Splice {
                out: tar.inner(),
                spliced: false,
            };
            loop {
                use ips_bridge::GzipSink;
                match pieces.recv().map_err(|_| vanished())? {
                    Piece::Member(i) => sink.begin_member(i),
                    Piece::Deflated(v) => {
                        let r = sink.deflated(&v);
                        pool.give(v);
                        r
                    }
                    Piece::Content(v) => {
                        let r = sink.content(&v);
                        pool.give(v);
                        r
                    }
                    Piece::End(trailer) => sink.end_member(trailer),
                    Piece::Done(done) => {
                        done?;
                        break;
                    }
                    Piece::Spooled(..) => unreachable!("a payload with pkg.size is not spooled"),
                }
                .map_err(io_err)?;
            }
            tar.pad(size).map_err(io_err)?;
        }
        None => {
            let (mut spool, size) = match pieces.recv().map_err(|_| vanished())? {
                Piece::Spooled(file, size) => (file, size),
                Piece::Done(Err(e)) => return Err(e),
                _ => unreachable!("a payload without pkg.size is spooled"),
            };
            tar.header(path, Kind::File { size }, &node.meta)
                .map_err(io_err)?;
            std::io::copy(&mut spool, tar.inner()).map_err(io_err)?;
            tar.pad(size).map_err(io_err)?;
            if let Piece::Done(Err(e)) = pieces.recv().map_err(|_| vanished())? {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Where a payload's gzip members go: the first one is spliced into a gzip layer as it is
/// stored (only its content is hashed, for the DiffID); the content of any further member,
/// and all content of a zstd layer, is written to the layer like any other bytes and
/// compressed by rdctl (the fallback). The worker that read the payload sent no more than
/// `pkg.size` bytes of content.
pub(super) struct Splice<'a, 'p, W: Write> {
    out: &'a mut Reporting<'p, LayerStream<W>>,
    spliced: bool,
}

impl<W: Write> ips_bridge::GzipSink for Splice<'_, '_, W> {
    fn begin_member(&mut self, index: u64) -> std::io::Result<()> {
        self.spliced = index == 0 && self.out.inner.begin_spliced()?;
        Ok(())
    }

    fn deflated(&mut self, data: &[u8]) -> std::io::Result<()> {
        if self.spliced {
            self.out.inner.spliced_deflated(data)?;
        }
        Ok(())
    }

    fn content(&mut self, data: &[u8]) -> std::io::Result<()> {
        if self.spliced {
            self.out.inner.spliced_content(data);
            if let Some(p) = self.out.progress {
                p.layer_bytes(data.len() as u64);
            }
            Ok(())
        } else {
            // Counted for the progress as `Reporting` writes them.
            self.out.write_all(data)
        }
    }

    fn end_member(&mut self, trailer: [u8; 8]) -> std::io::Result<()> {
        if self.spliced {
            self.out.inner.end_spliced(trailer)?;
            self.spliced = false;
        }
        Ok(())
    }
}
