//! The daemons' logs (`registry serve`, `worker run`): one setup for both. Logs go to stderr,
//! filtered by `RDCTL_LOG` (default `info`), as JSON lines with `--log-json`; colour only when
//! stderr is a terminal and `NO_COLOR` is unset or empty (<https://no-color.org>), so a log
//! file or pipe never carries escape codes.

use std::io::IsTerminal as _;

/// Installs the global subscriber.
pub fn init(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RDCTL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ));
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Colour only on a terminal, and never when `NO_COLOR` is set to a non-empty value.
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("".into())));
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None));
    }
}
