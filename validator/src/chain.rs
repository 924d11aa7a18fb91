//! The one error-chain formatter: an error and each of its causes, once each, joined by `": "`
//! (the shape `anyhow`'s `{:#}` prints), for logs, JSON reports and messages that carry a
//! cause as text.

use std::error::Error;

/// `e` and every `source()` below it, joined by `": "`.
pub fn error_chain(e: &dyn Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer {0}")]
    struct Outer(&'static str, #[source] std::io::Error);

    #[test]
    fn every_cause_once_in_order() {
        let e = Outer("x", std::io::Error::other("inner"));
        assert_eq!(error_chain(&e), "outer x: inner");
        assert_eq!(error_chain(&std::io::Error::other("alone")), "alone");
    }
}
