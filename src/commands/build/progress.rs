//! The progress of `rdctl build` on stderr: a bar per layer on a terminal, a line per layer
//! otherwise.

fn layer_line(index: usize, total: usize, l: &builder::BuiltLayer) -> String {
    format!(
        "layer {}/{total} {} {} ({} bytes{})",
        index + 1,
        l.digest,
        l.contents,
        l.size,
        if l.cached {
            ", from the layer cache"
        } else {
            ""
        }
    )
}

/// Progress as plain lines on stderr (not a terminal: logs, CI).
#[derive(Debug)]
pub(super) struct Lines;

impl builder::Progress for Lines {
    fn layer_finished(&self, index: usize, total: usize, layer: &builder::BuiltLayer) {
        eprintln!("{}", layer_line(index, total, layer));
    }
}

/// Progress as a bar per layer on a terminal (stderr), each replaced by its summary line.
#[derive(Debug, Default)]
pub(super) struct Bars {
    bar: std::sync::Mutex<Option<indicatif::ProgressBar>>,
}

impl builder::Progress for Bars {
    fn layer_started(&self, index: usize, total: usize, contents: &str, bytes: u64) {
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(bytes),
            indicatif::ProgressDrawTarget::stderr(),
        );
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix} {wide_msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(format!("layer {}/{total}", index + 1));
        bar.set_message(contents.to_owned());
        *self.bar.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar);
    }
    fn layer_bytes(&self, n: u64) {
        if let Some(b) = &*self.bar.lock().unwrap_or_else(|e| e.into_inner()) {
            b.inc(n);
            // The total is an estimate (PAX records): never show more done than the total.
            if b.length().is_some_and(|len| b.position() > len) {
                b.set_length(b.position());
            }
        }
    }
    fn layer_finished(&self, index: usize, total: usize, layer: &builder::BuiltLayer) {
        let line = layer_line(index, total, layer);
        match self.bar.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(b) => {
                b.finish_and_clear();
                eprintln!("{line}");
            }
            None => eprintln!("{line}"),
        }
    }
}
