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
mod referrers;
mod registry_client_auth;
mod registry_cluster;
mod registry_credentials;
mod registry_e2e;
mod registry_gc;
mod registry_s3;
mod registry_tls;
mod signing;
mod smf;
mod splice_e2e;
mod transfer;
mod util;
mod validate_cli;
mod validate_tools;
mod web_ui;
mod worker_e2e;
mod worker_policy;
