//! End-to-end tests across crates, with real servers and clients. One binary, one module per
//! area; `util` holds the shared helpers.

mod builder_e2e;
mod cli_help;
mod client_auth_layers;
mod client_faults;
mod depot_tls;
mod distribution_s3;
mod docs;
mod fault_proxy;
mod inspect_cli;
mod ips_cli;
mod package_search;
mod pkg_version_agreement;
mod pull_through;
mod referrers;
mod registry_client_auth;
mod registry_credentials;
mod registry_e2e;
mod registry_events;
mod registry_gc;
mod registry_governance;
mod registry_s3;
mod registry_scrub;
mod registry_tls;
mod signing;
mod smf;
mod splice_e2e;
mod sync;
mod transfer;
mod util;
mod validate_cli;
mod validate_tools;
mod web_ui;
mod worker_e2e;
mod worker_mirrors;
mod worker_policy;
