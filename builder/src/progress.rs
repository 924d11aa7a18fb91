//! Progress of a build, reported to whoever drives it (`rdctl build` draws bars on a terminal
//! and prints plain lines otherwise). The builder only says what happens; it never writes to
//! the terminal itself.

use crate::BuiltLayer;

/// Receives a build's progress. Every method has an empty default, so a caller implements
/// only what it shows. Called from the building thread.
pub trait Progress: Send + Sync + std::fmt::Debug {
    /// Layer `index` (from 0) of `total` starts; it holds `contents` (a package FMRI,
    /// `generated` or `image`) and its tar stream will be about `bytes` long (what
    /// [`Progress::layer_bytes`] adds up to; PAX records can make it a little longer).
    fn layer_started(&self, index: usize, total: usize, contents: &str, bytes: u64) {
        let _ = (index, total, contents, bytes);
    }
    /// `n` more bytes of the current layer's uncompressed tar stream were written.
    fn layer_bytes(&self, n: u64) {
        let _ = n;
    }
    /// The current layer is done (built, or copied from the layer cache).
    fn layer_finished(&self, index: usize, total: usize, layer: &BuiltLayer) {
        let _ = (index, total, layer);
    }
}
