//! The keychain: where the client finds a registry's credential (see [`crate::credentials`]
//! for the files and helpers it reads, [`crate::credential_provider`] for the plugins it asks
//! first).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::credential_provider;
use crate::credentials::{
    AuthFile, Credential, CredentialError, Source, helper_get, helper_server,
};
use crate::reference::canonical_host;

/// Finds credentials for registry hosts in an ordered list of files (see the module docs).
/// Answers are cached per host for the life of the keychain (helpers run once per host).
#[derive(Debug, Default)]
pub struct Keychain {
    files: Vec<PathBuf>,
    fixed: HashMap<String, Credential>,
    cache: Mutex<HashMap<String, Option<(Credential, Source)>>>,
    /// kubelet credential provider plugins, asked before the files for the hosts they match
    /// (their answers cached as they say, shared by clones).
    providers: Arc<credential_provider::Providers>,
}

impl Clone for Keychain {
    fn clone(&self) -> Self {
        Keychain {
            files: self.files.clone(),
            fixed: self.fixed.clone(),
            cache: Mutex::new(HashMap::new()),
            providers: self.providers.clone(),
        }
    }
}

/// The process environment the keychain reads (a seam so tests need not change the real one).
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `$HOME`.
    pub home: Option<PathBuf>,
    /// `$DOCKER_CONFIG`.
    pub docker_config: Option<PathBuf>,
    /// `$REGISTRY_AUTH_FILE`.
    pub registry_auth_file: Option<PathBuf>,
    /// `$XDG_RUNTIME_DIR`.
    pub xdg_runtime_dir: Option<PathBuf>,
    /// `$XDG_CONFIG_HOME`.
    pub xdg_config_home: Option<PathBuf>,
}

impl Env {
    /// The current process's environment (empty values count as unset).
    pub fn current() -> Env {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Env {
            home: var("HOME"),
            docker_config: var("DOCKER_CONFIG"),
            registry_auth_file: var("REGISTRY_AUTH_FILE"),
            xdg_runtime_dir: var("XDG_RUNTIME_DIR"),
            xdg_config_home: var("XDG_CONFIG_HOME"),
        }
    }

    fn docker_config_json(&self) -> Option<PathBuf> {
        match (&self.docker_config, &self.home) {
            (Some(d), _) => Some(d.join("config.json")),
            (None, Some(h)) => Some(h.join(".docker").join("config.json")),
            (None, None) => None,
        }
    }
}

impl Keychain {
    /// A keychain with no credentials (anonymous access only).
    pub fn empty() -> Keychain {
        Keychain::default()
    }

    /// The search list for `explicit` (`--auth-file`) and the environment.
    pub fn from_env(explicit: Option<&Path>, env: &Env) -> Keychain {
        let mut files: Vec<PathBuf> = Vec::new();
        files.extend(explicit.map(Path::to_owned));
        files.extend(env.registry_auth_file.clone());
        files.extend(env.docker_config_json());
        files.extend(
            env.xdg_runtime_dir
                .as_ref()
                .map(|d| d.join("containers/auth.json")),
        );
        match (&env.xdg_config_home, &env.home) {
            (Some(c), _) => files.push(c.join("containers/auth.json")),
            (None, Some(h)) => files.push(h.join(".config/containers/auth.json")),
            (None, None) => {}
        }
        let mut seen = std::collections::HashSet::new();
        files.retain(|f| seen.insert(f.clone()));
        Keychain {
            files,
            ..Keychain::default()
        }
    }

    /// The file `rdctl login` writes: `explicit`, else `$REGISTRY_AUTH_FILE`, else the docker
    /// config file.
    pub fn login_file(explicit: Option<&Path>, env: &Env) -> Option<PathBuf> {
        explicit
            .map(Path::to_owned)
            .or_else(|| env.registry_auth_file.clone())
            .or_else(|| env.docker_config_json())
    }

    /// Adds a credential for `host` that wins over every file (e.g. `--creds`).
    pub fn with_credential(mut self, host: &str, cred: Credential) -> Keychain {
        self.fixed.insert(canonical_host(host), cred);
        self
    }

    /// Asks these kubelet credential provider plugins first, for the hosts they match.
    pub fn with_providers(
        mut self,
        list: Vec<credential_provider::CredentialProvider>,
    ) -> Keychain {
        self.providers = Arc::new(credential_provider::Providers::new(list));
        self
    }

    /// The files searched, in order.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The credential for `host` and where it came from; `None` means anonymous.
    pub fn get(&self, host: &str) -> Result<Option<(Credential, Source)>, CredentialError> {
        self.get_for(host, None)
    }

    /// The credential for `host` when reading `image` (`host/repository`, with `:tag` or
    /// `@digest` for a manifest; what a credential provider plugin is told and matched
    /// against; `None`: the host alone). This may run credential helpers and
    /// plugins, which can take up to a minute: async callers run it on a blocking thread.
    pub fn get_for(
        &self,
        host: &str,
        image: Option<&str>,
    ) -> Result<Option<(Credential, Source)>, CredentialError> {
        let host = canonical_host(host);
        let host = host.as_str();
        if let Some(c) = self.fixed.get(host) {
            return Ok(Some((c.clone(), Source::Explicit)));
        }
        // Plugins keep their own cache, for as long as their answer says.
        if let Some((c, name)) = self.providers.get(host, image.unwrap_or(host))? {
            return Ok(Some((c, Source::Provider(name))));
        }
        if let Some(hit) = self.cache.lock().expect("keychain lock").get(host) {
            return Ok(hit.clone());
        }
        let found = self.lookup(host)?;
        self.cache
            .lock()
            .expect("keychain lock")
            .insert(host.to_owned(), found.clone());
        Ok(found)
    }

    fn lookup(&self, host: &str) -> Result<Option<(Credential, Source)>, CredentialError> {
        for path in &self.files {
            let file = AuthFile::load(path)?;
            let helper = file.helper(host).map(str::to_owned);
            let per_host = file.host_helper(host).is_some();
            if per_host && let Some(h) = &helper {
                if let Some(c) = helper_get(h, helper_server(host))? {
                    return Ok(Some((c, Source::Helper(h.clone()))));
                }
                continue;
            }
            if let Some(c) = file.get(host)? {
                return Ok(Some((c, Source::File(path.clone()))));
            }
            if let Some(h) = &helper
                && let Some(c) = helper_get(h, helper_server(host))?
            {
                return Ok(Some((c, Source::Helper(h.clone()))));
            }
        }
        Ok(None)
    }
}
