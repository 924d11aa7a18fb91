//! `rdctl key generate`, `rdctl sign`, `rdctl verify`, `rdctl attest`, and the signing step of
//! `rdctl build --sign-key`: cosign-compatible signatures and attestations through
//! `registry_client::signatures`, with keys and documents from the `trust` crate.
//!
//! One file per command: `key` (generate), `sign` (sign and attest), `verify`; what they
//! share (the password source, reading keys) lives here.

mod key;
mod sign;
mod verify;

pub use key::{KeyCommand, key};
pub use sign::{AttestArgs, SignArgs, attest, sign};
pub use verify::{VerifyArgs, verify};

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use trust::{SigningKey, VerifyingKey};
use zeroize::Zeroizing;

/// Where a private key's password comes from.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PasswordArgs {
    /// Read the private key's password from the first line of FILE. Without it:
    /// $RDCTL_PASSWORD, then cosign's $COSIGN_PASSWORD, then a prompt on the terminal (never
    /// echoed).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
}

impl PasswordArgs {
    /// The password: the file, the environment, or the terminal (asked twice when
    /// `confirm`).
    pub fn read(&self, prompt: &str, confirm: bool) -> anyhow::Result<Zeroizing<String>> {
        if let Some(f) = &self.password_file {
            let text = Zeroizing::new(
                std::fs::read_to_string(f)
                    .with_context(|| format!("cannot read the password file {}", f.display()))?,
            );
            let line = text.lines().next().unwrap_or_default();
            return Ok(Zeroizing::new(line.to_owned()));
        }
        for var in ["RDCTL_PASSWORD", "COSIGN_PASSWORD"] {
            if let Ok(v) = std::env::var(var) {
                return Ok(Zeroizing::new(v));
            }
        }
        // rpassword reads /dev/tty with echo off; no terminal is an error, not a hang.
        let first = Zeroizing::new(rpassword::prompt_password(prompt).map_err(|e| {
            anyhow::anyhow!(
                "no password: give --password-file, set RDCTL_PASSWORD or COSIGN_PASSWORD, or run on a terminal ({e})"
            )
        })?);
        if confirm {
            let again = Zeroizing::new(
                rpassword::prompt_password("Enter the password again: ")
                    .context("cannot read the password")?,
            );
            if *again != *first {
                bail!("the passwords differ");
            }
        }
        Ok(first)
    }
}

/// Reads a private key (cosign's format, PKCS#8 encrypted or not, SEC1), asking for the
/// password only when the file is encrypted.
pub fn load_signing_key(path: &Path, password: &PasswordArgs) -> anyhow::Result<SigningKey> {
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read the key {}", path.display()))?;
    let prompt = format!("Password for {}: ", path.display());
    let key = SigningKey::from_pem(&bytes, &path.display().to_string(), &mut || {
        password.read(&prompt, false).map_err(|e| e.into())
    })?;
    Ok(key)
}

fn load_public_keys(paths: &[PathBuf]) -> anyhow::Result<Vec<VerifyingKey>> {
    paths
        .iter()
        .map(|p| {
            let bytes =
                std::fs::read(p).with_context(|| format!("cannot read the key {}", p.display()))?;
            Ok(VerifyingKey::from_pem(&bytes, &p.display().to_string())?)
        })
        .collect()
}
