//! `rdctl key generate`: a cosign-compatible key pair.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};

use super::PasswordArgs;

/// `rdctl key …`.
#[derive(Debug, clap::Subcommand)]
pub enum KeyCommand {
    /// Generate an ECDSA P-256 key pair (PREFIX.key and PREFIX.pub) cosign can use.
    Generate(KeyGenerateArgs),
}

/// The private key file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyFormat {
    /// cosign's `ENCRYPTED SIGSTORE PRIVATE KEY` (scrypt + NaCl secretbox): `cosign sign
    /// --key` reads it as it is.
    Cosign,
    /// PKCS#8 PEM, encrypted (PBES2) unless --no-password; cosign reads only the unencrypted
    /// form, through `cosign import-key-pair`.
    Pkcs8,
}

/// Arguments of `rdctl key generate`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl key generate                                   # writes cosign.key and cosign.pub, asks for a password
  COSIGN_PASSWORD=... rdctl key generate --output-key-prefix release
  rdctl key generate --output-key-prefix ci --password-file ./pw.txt --json
  rdctl key generate --format pkcs8 --no-password --output-key-prefix plain

The private key is written in cosign's own encrypted format by default, so `cosign sign --key
PREFIX.key` (with COSIGN_PASSWORD) and `rdctl sign --key PREFIX.key` both use it; PREFIX.pub is
the PUBLIC KEY PEM `cosign public-key` prints. Existing files are never overwritten. The key id
printed is sha256 of the public key (what rdctl verify and the worker's policy name it by).

Exit status: 0 written, 2 failed.")]
pub struct KeyGenerateArgs {
    /// Write PREFIX.key (mode 0600) and PREFIX.pub.
    #[arg(long, value_name = "PREFIX", default_value = "cosign")]
    pub output_key_prefix: PathBuf,
    /// The private key file's format.
    #[arg(long, value_enum, default_value_t = KeyFormat::Cosign)]
    pub format: KeyFormat,
    /// Write the private key unencrypted (PKCS#8 `PRIVATE KEY`; needs --format pkcs8).
    #[arg(long)]
    pub no_password: bool,
    #[command(flatten)]
    pub password: PasswordArgs,
    /// Print the file names and key id as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `rdctl key …`.
pub fn key(cmd: KeyCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        KeyCommand::Generate(a) => key_generate(a),
    }
}

fn with_ext(prefix: &Path, ext: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

fn key_generate(args: KeyGenerateArgs) -> anyhow::Result<ExitCode> {
    if args.no_password && args.format == KeyFormat::Cosign {
        bail!(
            "--no-password: cosign's key format is always encrypted (an empty password is allowed); use --format pkcs8 --no-password for a plain key"
        );
    }
    let key_path = with_ext(&args.output_key_prefix, "key");
    let pub_path = with_ext(&args.output_key_prefix, "pub");
    for p in [&key_path, &pub_path] {
        if p.exists() {
            bail!("{} exists: not overwriting it", p.display());
        }
    }
    let password = if args.no_password {
        None
    } else {
        Some(args.password.read("Password for the new key: ", true)?)
    };
    let pair = trust::generate();
    let pem = match (args.format, &password) {
        (KeyFormat::Cosign, Some(pw)) => pair.signing.to_cosign_pem(pw)?,
        (KeyFormat::Pkcs8, pw) => pair.signing.to_pkcs8_pem(pw.as_ref().map(|p| p.as_str()))?,
        (KeyFormat::Cosign, None) => unreachable!("refused above"),
    };
    write_new(&key_path, pem.as_bytes(), 0o600)?;
    if let Err(e) = write_new(&pub_path, pair.verifying().to_pem().as_bytes(), 0o644) {
        let _ = std::fs::remove_file(&key_path);
        return Err(e);
    }
    let id = pair.verifying().key_id().as_str().to_owned();
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = serde_json::json!({
            "private_key": key_path.display().to_string(),
            "public_key": pub_path.display().to_string(),
            "key_id": id,
            "format": match args.format { KeyFormat::Cosign => "cosign", KeyFormat::Pkcs8 => "pkcs8" },
            "encrypted": password.is_some(),
        });
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        writeln!(out, "private key {}", key_path.display())?;
        writeln!(out, "public key  {}", pub_path.display())?;
        writeln!(out, "key id      {id}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates `path` (never replacing a file) with `mode` and writes `bytes`.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))
}
