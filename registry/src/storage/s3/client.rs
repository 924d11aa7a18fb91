//! Client setup: the connection settings ([`S3Config`]), building the SDK client over rustls,
//! and the bucket check `serve` runs before it listens.

use super::*;

/// Connection settings of an [`S3Store`].
#[derive(Debug, Clone)]
pub struct S3Config {
    /// Endpoint URL, e.g. `http://127.0.0.1:8333`.
    pub endpoint: String,
    /// Bucket (must exist).
    pub bucket: String,
    /// Key prefix inside the bucket (`""` for none; a missing trailing `/` is added).
    pub prefix: String,
    /// Region for SigV4 (any string for SeaweedFS).
    pub region: String,
    /// Credentials (see [`super::resolve_s3_credentials`] for where the server takes them
    /// from); `None` signs with a placeholder pair, which a SeaweedFS without identities
    /// accepts and one with identities refuses.
    pub credentials: Option<S3Credentials>,
    /// Multipart part size (raised to [`MIN_PART_SIZE`] if smaller).
    pub part_size: u64,
    /// Attempts per S3 request, the first included (transient errors and 5xx are retried).
    pub max_attempts: u32,
    /// The SDK's first retry waits a random time up to this, doubling with each retry (1 s, the
    /// SDK's default; tests that inject hundreds of faults set a few milliseconds).
    pub initial_backoff: Duration,
    /// Timeout to connect.
    pub connect_timeout: Duration,
    /// Timeout of one attempt (a part upload included).
    pub attempt_timeout: Duration,
    /// Timeout of one operation over all its attempts.
    pub operation_timeout: Duration,
}

impl S3Config {
    /// Settings with the defaults of research §5.4: 5 MiB parts, 4 attempts, 5 s to connect,
    /// 60 s per attempt, 180 s per operation, region `us-east-1`.
    pub fn new(endpoint: impl Into<String>, bucket: impl Into<String>) -> S3Config {
        S3Config {
            endpoint: endpoint.into(),
            bucket: bucket.into(),
            prefix: String::new(),
            region: "us-east-1".to_owned(),
            credentials: None,
            part_size: MIN_PART_SIZE,
            max_attempts: 4,
            initial_backoff: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(60),
            operation_timeout: Duration::from_secs(180),
        }
    }

    /// Sets the key prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> S3Config {
        self.prefix = prefix.into();
        self
    }
}

impl S3Store {
    /// Builds a client for `config`. Does no I/O; the first operation reaches the endpoint.
    pub fn new(config: S3Config) -> S3Store {
        use aws_smithy_http_client::tls;
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let creds = match &config.credentials {
            Some(c) => Credentials::new(
                &c.access_key_id,
                &c.secret_access_key,
                c.session_token.clone(),
                None,
                "rdctl",
            ),
            None => Credentials::new("rdctl", "rdctl-no-credentials", None, None, "none"),
        };
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(&config.endpoint)
            .region(Region::new(config.region.clone()))
            .credentials_provider(creds)
            // SeaweedFS has no virtual-host addressing without a domain name set up.
            .force_path_style(true)
            // Checksums only where S3 requires them: trailing checksums and aws-chunked bodies
            // have broken third-party servers repeatedly (research §5.2, §5.4).
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            // Bodies are whole `Bytes`, so every retry can replay them.
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(config.max_attempts.max(1))
                    .with_initial_backoff(config.initial_backoff),
            )
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(config.connect_timeout)
                    .operation_attempt_timeout(config.attempt_timeout)
                    .operation_timeout(config.operation_timeout)
                    .build(),
            )
            // Uploads of whole parts can pause while SeaweedFS writes; timeouts above bound them.
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
            .http_client(http)
            .build();
        let mut prefix = config.prefix.trim_matches('/').to_owned();
        if !prefix.is_empty() {
            prefix.push('/');
        }
        S3Store {
            inner: Arc::new(Inner {
                client: Client::from_conf(conf),
                bucket: config.bucket,
                prefix,
                part_size: config.part_size.max(MIN_PART_SIZE),
                instance: uuid::Uuid::new_v4().as_simple().to_string(),
                live: Mutex::new(HashSet::new()),
                ahead_parts: Arc::new(tokio::sync::Semaphore::new(super::AHEAD_PARTS)),
            }),
        }
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.inner.bucket
    }

    /// Asks the endpoint about the bucket (HeadBucket, at most `within`), so that a missing
    /// bucket, a bad name or refused credentials stop a registry at start rather than turning
    /// every later write into a 500. An endpoint that cannot be asked (down, slow, answering
    /// 5xx) is [`BucketProblem::Unreachable`]: the caller may start anyway, since storage often
    /// comes up after its clients.
    pub async fn check_bucket(&self, within: Duration) -> Result<(), BucketProblem> {
        let inner = &self.inner;
        let head = inner.client.head_bucket().bucket(&inner.bucket).send();
        let e = match tokio::time::timeout(within, head).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => e,
            Err(_) => {
                return Err(BucketProblem::Unreachable(format!(
                    "no answer to HeadBucket within {within:?}"
                )));
            }
        };
        let status = match &e {
            SdkError::ServiceError(_) => e.raw_response().map(|r| r.status().as_u16()),
            _ => None,
        };
        let detail = DisplayErrorContext(&e).to_string();
        Err(match status {
            Some(404) => BucketProblem::Refused("the bucket does not exist".to_owned()),
            Some(401 | 403) => BucketProblem::Refused(
                "access denied (check the S3 credentials and their rights on the bucket)"
                    .to_owned(),
            ),
            Some(s @ 400..=499) if s != 408 && s != 429 => {
                BucketProblem::Refused(format!("HTTP {s} (is the bucket name valid?): {detail}"))
            }
            _ => BucketProblem::Unreachable(detail),
        })
    }
}

/// Why [`S3Store::check_bucket`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketProblem {
    /// The endpoint answered: this bucket cannot be used as configured.
    Refused(String),
    /// The endpoint could not be asked.
    Unreachable(String),
}
