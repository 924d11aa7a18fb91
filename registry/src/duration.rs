//! Durations in configuration files and flags: `0`, `500ms`, `90s`, `15m`, `1h`, `7d`. The one
//! parser lives in `config-toml` ([`config_toml::units`]), shared by every file and flag.

pub use config_toml::{UnitError, format_duration, parse_duration};
