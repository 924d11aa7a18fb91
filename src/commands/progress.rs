//! Byte progress of blob transfers on a terminal (`rdctl push`, `pull`, `copy`, `sync`): a bar
//! per blob with its total, drawn on stderr only when stderr is a terminal and the command
//! does not print JSON. Whatever is drawn, it also counts what is complete at the destination,
//! so an interrupted command can say what was kept.

use std::future::Future;
use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use registry_client::progress::{BlobOutcome, BlobProgress, Progress};
use registry_client::transfer::Content;

/// Exit status of a command stopped with ctrl-c (128 + SIGINT, as shells report it).
pub const INTERRUPTED: u8 = 130;

/// Blobs complete at the destination so far: moved by this run or already there.
#[derive(Debug, Default)]
struct Kept {
    blobs: AtomicUsize,
    bytes: AtomicU64,
    /// Started and not finished.
    moving: AtomicUsize,
}

/// Bars per blob on stderr (when drawn) and the count of what is kept.
pub struct Bars {
    multi: Option<indicatif::MultiProgress>,
    kept: std::sync::Arc<Kept>,
    /// What the interrupted message says of downloads stopped midway.
    midway: String,
    /// Where reports go when no bars are drawn (the worker's log lines).
    otherwise: Option<std::sync::Arc<dyn Progress>>,
}

impl std::fmt::Debug for Bars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bars")
            .field("drawn", &self.multi.is_some())
            .field("kept", &self.kept)
            .field("midway", &self.midway)
            .field("otherwise", &self.otherwise.is_some())
            .finish()
    }
}

/// What happens to a download stopped midway, for copies into a layout.
const LAYOUT_MIDWAY: &str = "a download into a layout keeps what arrived";

/// What happens to an upload stopped midway, for pushes and copies to a registry: nothing of
/// it is kept (the client does not resume an upload session across runs, and the registry
/// drops the unfinished one).
pub const UPLOAD_MIDWAY: &str = "an upload stopped midway is not kept: the registry drops it and the next run sends that blob again";

/// Both, for a sync with registry and bundle destinations.
pub const MIXED_MIDWAY: &str = "an upload to a registry stopped midway is not kept and is sent again on the next run; a download into a bundle keeps what arrived";

impl Bars {
    /// Bars drawn when stderr is a terminal and `json` is off; otherwise silent.
    pub fn new(json: bool) -> Bars {
        Bars::drawn(!json && std::io::stderr().is_terminal())
    }

    fn drawn(draw: bool) -> Bars {
        Bars {
            multi: draw.then(|| {
                indicatif::MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::stderr())
            }),
            kept: Default::default(),
            midway: LAYOUT_MIDWAY.to_owned(),
            otherwise: None,
        }
    }

    /// When no bars are drawn, also reports to `progress` (the worker logs instead).
    pub fn otherwise(mut self, progress: std::sync::Arc<dyn Progress>) -> Bars {
        if self.multi.is_none() {
            self.otherwise = Some(progress);
        }
        self
    }

    /// Says `midway` of downloads stopped midway when interrupted (the worker's content store
    /// keeps them in its ingest directory, not in a layout).
    pub fn midway(mut self, midway: impl Into<String>) -> Bars {
        self.midway = midway.into();
        self
    }

    /// Prints a line on stderr above the bars (or plainly when none are drawn).
    pub fn println(&self, line: &str) {
        match &self.multi {
            Some(m) => {
                if m.println(line).is_err() {
                    eprintln!("{line}");
                }
            }
            None => eprintln!("{line}"),
        }
    }

    /// Runs `work` until it ends or ctrl-c comes; on ctrl-c, `None` after saying on stderr what
    /// is kept at `destination` and that running the same command again resumes. `one_image`:
    /// the work is one copy, whose tag is written last (so none was).
    pub async fn until_interrupted<T>(
        &self,
        destination: &str,
        one_image: bool,
        work: impl Future<Output = T>,
    ) -> Option<T> {
        tokio::select! {
            out = work => Some(out),
            _ = tokio::signal::ctrl_c() => {
                if let Some(m) = &self.multi {
                    let _ = m.clear();
                }
                eprintln!("{}", self.interrupted_message(destination, one_image));
                None
            }
        }
    }

    fn interrupted_message(&self, destination: &str, one_image: bool) -> String {
        let blobs = self.kept.blobs.load(Ordering::Relaxed);
        let bytes = self.kept.bytes.load(Ordering::Relaxed);
        let moving = self.kept.moving.load(Ordering::Relaxed);
        let mut msg = format!(
            "interrupted: {blobs} blob(s) ({bytes} bytes) are complete at {destination} and kept"
        );
        if moving > 0 {
            msg.push_str(&format!(
                "; {moving} blob(s) were stopped midway ({})",
                self.midway
            ));
        }
        if one_image {
            msg.push_str("; the tag was not written");
        }
        msg.push_str(". Run the same command again to resume: blobs already there are skipped");
        msg
    }
}

/// One blob's bar.
struct BlobBar {
    bar: Option<indicatif::ProgressBar>,
    size: u64,
    kept: std::sync::Arc<Kept>,
    otherwise: Option<Box<dyn BlobProgress>>,
}

impl BlobProgress for BlobBar {
    fn advance(&self, bytes: u64) {
        if let Some(b) = &self.bar {
            b.inc(bytes);
        }
        if let Some(o) = &self.otherwise {
            o.advance(bytes);
        }
    }
    fn finish(&self, outcome: BlobOutcome) {
        if let Some(o) = &self.otherwise {
            o.finish(outcome);
        }
        self.kept.moving.fetch_sub(1, Ordering::Relaxed);
        if outcome == BlobOutcome::Copied {
            self.kept.blobs.fetch_add(1, Ordering::Relaxed);
            self.kept.bytes.fetch_add(self.size, Ordering::Relaxed);
        }
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Progress for Bars {
    fn blob_started(&self, blob: &Content, resumed: u64) -> Box<dyn BlobProgress> {
        let bar = self.multi.as_ref().map(|m| {
            let bar = m.add(indicatif::ProgressBar::new(blob.size));
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} {eta}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar.set_prefix(short(blob));
            bar.set_position(resumed);
            bar
        });
        self.kept.moving.fetch_add(1, Ordering::Relaxed);
        Box::new(BlobBar {
            bar,
            size: blob.size,
            kept: self.kept.clone(),
            otherwise: self
                .otherwise
                .as_ref()
                .map(|o| o.blob_started(blob, resumed)),
        })
    }
    fn blob_present(&self, blob: &Content) {
        if let Some(o) = &self.otherwise {
            o.blob_present(blob);
        }
        self.kept.blobs.fetch_add(1, Ordering::Relaxed);
        self.kept.bytes.fetch_add(blob.size, Ordering::Relaxed);
    }
}

/// `sha256:0123456789ab`: enough of a digest to tell blobs apart on screen.
fn short(blob: &Content) -> String {
    let d = blob.digest.as_str();
    d.char_indices()
        .nth(d.find(':').map_or(0, |i| i + 13))
        .map_or(d, |(i, _)| &d[..i])
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(hex: char, size: u64) -> Content {
        Content {
            digest: validator::Digest::parse(&format!("sha256:{}", hex.to_string().repeat(64)))
                .unwrap(),
            size,
            media_type: "application/octet-stream".to_owned(),
        }
    }

    #[test]
    fn interrupted_counts_complete_blobs_only() {
        let bars = Bars::drawn(false);
        assert!(bars.multi.is_none());
        bars.blob_present(&content('a', 10));
        let done = bars.blob_started(&content('b', 100), 0);
        done.advance(100);
        done.finish(BlobOutcome::Copied);
        let failed = bars.blob_started(&content('c', 1000), 0);
        failed.advance(5);
        failed.finish(BlobOutcome::Failed);
        let resumed = bars.blob_started(&content('d', 1000), 400);
        resumed.advance(10);
        drop(resumed);
        let msg = bars.interrupted_message("docker://reg/x:1", true);
        assert_eq!(
            msg,
            "interrupted: 2 blob(s) (110 bytes) are complete at docker://reg/x:1 and kept; \
             1 blob(s) were stopped midway (a download into a layout keeps what arrived); the \
             tag was not written. Run the same command again to resume: blobs already there \
             are skipped"
        );
        assert_eq!(
            short(&content('e', 1)),
            format!("sha256:{}", "e".repeat(12))
        );
    }
}
