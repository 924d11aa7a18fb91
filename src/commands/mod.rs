//! One module per subcommand: each turns its arguments into a library call and prints.

pub mod artifact;
pub mod build;
pub mod client;
pub mod inspect;
pub mod ips;
pub mod lock;
pub mod login;
pub mod manage;
pub mod meta;
pub mod output;
pub mod progress;
pub mod provenance;
pub mod raw;
pub mod registry;
pub mod search;
pub mod sync;
pub mod transfer;
pub mod trust;
pub mod validate;
pub mod worker;
