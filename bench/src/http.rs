//! The HTTP pieces every load client of `rd-bench` shares: one client setup, an upload's
//! `Location`, and a response checked for success with the server's words in the error.

use anyhow::{Context as _, bail};

pub fn client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .no_proxy()
        .build()?)
}

/// Resolves a `Location` header against the registry URL.
pub fn location(base: &str, resp: &reqwest::Response) -> anyhow::Result<String> {
    let loc = resp
        .headers()
        .get(reqwest::header::LOCATION)
        .context("upload response without Location")?
        .to_str()?;
    Ok(
        if loc.starts_with("http://") || loc.starts_with("https://") {
            loc.to_owned()
        } else {
            format!("{}{}", base.trim_end_matches('/'), loc)
        },
    )
}

pub fn with_digest(loc: &str, digest: &str) -> String {
    let sep = if loc.contains('?') { '&' } else { '?' };
    format!("{loc}{sep}digest={digest}")
}

pub async fn check(resp: reqwest::Response, what: &str) -> anyhow::Result<reqwest::Response> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let text = resp.text().await.unwrap_or_default();
    bail!("{what}: {status}: {text:.400}")
}
