//! `rdctl login`, `rdctl logout`: keep a registry credential in docker's config.json (or the
//! credential helper it names) with `registry_client::login`.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use registry_client::login::{self, registry_host};
use registry_client::{AuthEnv, Credential, Keychain};

use super::client::ClientArgs;

/// Arguments of `rdctl login`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl login registry.example:5000                   # prompts for user name and password
  printf '%s\\n' \"$PASS\" | rdctl login -u ci --password-stdin registry.example:5000
  rdctl login --ca-file ./ca.pem --auth-file ./auth.json -u alice 127.0.0.1:5443

The credential is checked first (GET /v2/, answering a Basic or bearer-token challenge) and
saved only when the registry accepts it: into the credential helper the file names for the
host (credHelpers, credsStore), else into the file (mode 0600). The file is --auth-file, else
$REGISTRY_AUTH_FILE, else $DOCKER_CONFIG/config.json (~/.docker/config.json): the first file
every rdctl command, docker and podman read. There is no password flag: it would show in ps.
The user name and password are asked on the terminal (/dev/tty, as ssh and gpg do), never
read from standard input, which a script may have redirected; without a terminal give
--username and --password-stdin (the one way to pass the password non-interactively).

Exit status: 0 logged in; 2 the registry refused the credential (nothing saved) or could not
be reached, or the file could not be written.")]
pub struct LoginArgs {
    /// The registry, `HOST[:PORT]` (a URL like https://HOST:PORT/ is accepted).
    pub registry: String,
    /// The user name (asked on the terminal, /dev/tty, when missing).
    #[arg(long, short = 'u', value_name = "USER")]
    pub username: Option<String>,
    /// Read the password from standard input (one line; the trailing newline is dropped):
    /// the way for scripts, since without it the password is asked on the terminal.
    #[arg(long)]
    pub password_stdin: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `rdctl logout`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl logout registry.example:5000
  rdctl logout --auth-file ./auth.json 127.0.0.1:5443

Removes the registry's entry from the file (--auth-file, else $REGISTRY_AUTH_FILE, else
$DOCKER_CONFIG/config.json) and the copy held by the credential helper it names.

Exit status: 0 removed, or there was nothing to remove (said on stderr); 2 the file or helper
could not be read or written.")]
pub struct LogoutArgs {
    /// The registry, `HOST[:PORT]`.
    pub registry: String,
    /// The credential file to edit.
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
}

fn login_file(explicit: Option<&std::path::Path>, env: &AuthEnv) -> anyhow::Result<PathBuf> {
    Keychain::login_file(explicit, env).context(
        "no credential file: HOME, DOCKER_CONFIG and REGISTRY_AUTH_FILE are unset; give --auth-file",
    )
}

/// The controlling terminal, where prompts go and answers come from (as ssh and gpg read
/// passwords): standard input may be a file or pipe a script set up for something else.
/// `None` without one (a daemon, CI).
fn terminal() -> Option<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()
}

/// One line from `r`, without its line ending.
fn read_line(r: &mut dyn std::io::BufRead) -> std::io::Result<String> {
    let mut s = String::new();
    r.read_line(&mut s)?;
    Ok(s.trim_end_matches(['\n', '\r']).to_owned())
}

/// Runs `rdctl login`.
pub fn login(args: LoginArgs) -> anyhow::Result<ExitCode> {
    let host = registry_host(&args.registry)?;
    let env = AuthEnv::current();
    let file = login_file(args.client.auth_file.as_deref(), &env)?;
    let stdin = std::io::stdin();
    let username = match args.username {
        Some(u) => u,
        None if args.password_stdin => bail!("--password-stdin needs --username"),
        None => {
            let mut tty =
                terminal().context("no terminal to ask for the user name on: give --username")?;
            write!(tty, "Username: ")?;
            tty.flush()?;
            read_line(&mut std::io::BufReader::new(tty)).context("cannot read the user name")?
        }
    };
    if username.is_empty() || username.contains(':') {
        bail!("user name {username:?}: must be non-empty and without ':'");
    }
    let password = if args.password_stdin {
        let mut s = String::new();
        stdin
            .lock()
            .read_to_string(&mut s)
            .context("cannot read the password from standard input")?;
        // One line: the newline `echo` adds is not part of the password.
        s.trim_end_matches(['\n', '\r']).to_owned()
    } else if terminal().is_some() {
        // rpassword prompts and reads on /dev/tty with echo off.
        rpassword::prompt_password("Password: ").context("cannot read the password")?
    } else {
        bail!("no terminal to ask for the password on: use --password-stdin");
    };
    if password.is_empty() {
        bail!("empty password");
    }
    let outcome = crate::runtime::block_on(login::login(
        args.client.builder(),
        &host,
        Credential::Basic { username, password },
        &file,
    ))??;
    if !outcome.challenged {
        eprintln!(
            "rdctl: warning: {host} did not ask for credentials, so they were saved without being checked"
        );
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "Login Succeeded: {host} (saved in {})", outcome.stored)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `rdctl logout`.
pub fn logout(args: LogoutArgs) -> anyhow::Result<ExitCode> {
    let host = registry_host(&args.registry)?;
    let file = login_file(args.auth_file.as_deref(), &AuthEnv::current())?;
    let removed = login::logout(&file, &host)?;
    if removed.is_empty() {
        eprintln!(
            "rdctl: not logged in to {host}: {} has no credential for it",
            file.display()
        );
    }
    let mut out = std::io::stdout().lock();
    for r in removed {
        writeln!(out, "Removed the credential for {host} from {r}")?;
    }
    Ok(ExitCode::SUCCESS)
}
