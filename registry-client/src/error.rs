//! What can go wrong talking to a registry, with classes for callers to branch on.

use std::io;
use std::path::PathBuf;

use validator::{Digest, VerifyError};

use crate::credentials::CredentialError;

/// Classes of [`ClientError`] for callers to branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The manifest, blob or repository does not exist.
    NotFound,
    /// 401 or 403: final, never retried.
    Unauthorized,
    /// Server or network trouble that outlasted the retries.
    Transient,
    /// Content did not match its digest or size.
    Verify,
    /// The request or the registry's answer was invalid.
    Invalid,
}

/// A registry operation failed. Every variant names the URL involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// 401/403 (also from the token endpoint).
    #[error("registry {registry}: {status} {}: {detail} ({url})", if *status == 403 { "Forbidden" } else { "Unauthorized" })]
    Unauthorized {
        /// The URL.
        url: String,
        /// The registry host.
        registry: String,
        /// 401 or 403.
        status: u16,
        /// What was sent and what the registry said (never the secret).
        detail: String,
    },
    /// The credential store could not be read.
    #[error("registry {registry}: cannot read credentials")]
    Credentials {
        /// The registry host.
        registry: String,
        /// The cause (boxed: it is large and rare).
        #[source]
        source: Box<CredentialError>,
    },
    /// A CA file or client certificate could not be loaded.
    #[error("{}: {reason}", path.display())]
    Tls {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// 404.
    #[error("{url}: not found ({code})")]
    NotFound {
        /// The URL.
        url: String,
        /// The OCI error code, if the registry sent one.
        code: String,
    },
    /// Another 4xx answer, or an unexpected status.
    #[error("{url}: registry answered {status} {code}: {message}")]
    Registry {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
        /// The OCI error code, if any.
        code: String,
        /// The error message or body excerpt.
        message: String,
    },
    /// 5xx, 429, connection or body errors outlasted the retries.
    #[error("{url}: still failing after {attempts} attempts: {last}")]
    Transient {
        /// The URL.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// Content did not verify.
    #[error("{url}: content does not verify")]
    Verify {
        /// The URL.
        url: String,
        /// The mismatch.
        #[source]
        source: VerifyError,
    },
    /// The registry's answer broke the protocol (missing header, bad digest header).
    #[error("{url}: {reason}")]
    Protocol {
        /// The URL.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// Reading the content to push failed.
    #[error("reading the blob {digest} to push failed")]
    Source {
        /// The blob.
        digest: Digest,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The HTTP client could not be built or a request could not be formed.
    #[error("http client error for {url}")]
    Http {
        /// The URL.
        url: String,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
}

impl ClientError {
    /// The error's class.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClientError::Unauthorized { .. } | ClientError::Credentials { .. } => {
                ErrorKind::Unauthorized
            }
            ClientError::NotFound { .. } => ErrorKind::NotFound,
            ClientError::Transient { .. } => ErrorKind::Transient,
            ClientError::Verify { .. } => ErrorKind::Verify,
            ClientError::Registry { .. }
            | ClientError::Protocol { .. }
            | ClientError::Source { .. }
            | ClientError::Tls { .. }
            | ClientError::Http { .. } => ErrorKind::Invalid,
        }
    }
}
