//! `rd-bench grow`: fills a registry store with many small images, writing through the store
//! API (`registry::storage::Store` and the key builders of `registry::storage::layout`), not
//! HTTP, so 100,000 blobs take minutes rather than hours. The documents written are the ones
//! the registry writes for a push (layout's module docs list them): blob bytes under their
//! digest, a blob link and a manifest link per repository, the repository marker, one tag index
//! per repository and the catalog. `bench/growth.sh` then checks the result through the
//! registry's HTTP API (a manifest by tag and its blobs pull and verify), so a drift between
//! these documents and the registry's fails the bench instead of measuring nonsense.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use bytes::Bytes;
use futures_util::StreamExt as _;
use registry::storage::{FsStore, PutMode, S3Config, S3Store, Store, StoreError, layout};
use serde_json::json;
use validator::{Digest, Name};

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";

#[derive(Debug, clap::Args)]
pub struct GrowArgs {
    /// Filesystem store directory (the registry's `data`).
    #[arg(long, conflicts_with = "s3_endpoint")]
    data: Option<std::path::PathBuf>,
    /// S3 endpoint (with --s3-bucket) instead of a directory.
    #[arg(long, requires = "s3_bucket")]
    s3_endpoint: Option<String>,
    #[arg(long)]
    s3_bucket: Option<String>,
    #[arg(long, default_value = "")]
    s3_prefix: String,
    /// Repositories `grow/r0000`, `grow/r0001`, ...
    #[arg(long, default_value_t = 1000)]
    repos: usize,
    /// Manifests per repository.
    #[arg(long, default_value_t = 10)]
    manifests: usize,
    /// Layers per manifest (each manifest also has its own config blob).
    #[arg(long, default_value_t = 9)]
    layers: usize,
    /// Every Nth manifest gets no tag (garbage for `gc --delete-untagged`); 0: all tagged.
    #[arg(long, default_value_t = 10)]
    untagged_every: usize,
    /// Tags in the repository `grow/big` (pointing at its manifests in turn); 0: no such
    /// repository.
    #[arg(long, default_value_t = 10_000)]
    big_tags: usize,
    /// Store requests in flight.
    #[arg(long, default_value_t = 32)]
    conc: usize,
}

fn store(a: &GrowArgs) -> anyhow::Result<Arc<dyn Store>> {
    Ok(match (&a.data, &a.s3_endpoint, &a.s3_bucket) {
        (Some(d), None, _) => {
            Arc::new(FsStore::open(d).with_context(|| format!("opening {}", d.display()))?)
        }
        (None, Some(e), Some(b)) => Arc::new(S3Store::new(
            S3Config::new(e, b).prefix(a.s3_prefix.clone()),
        )),
        _ => anyhow::bail!("give --data DIR or --s3-endpoint URL --s3-bucket NAME"),
    })
}

/// One write: the key's builder already ran; `create` writes only when absent.
struct Put {
    key: registry::storage::Key,
    bytes: Bytes,
    create: bool,
}

fn doc(v: serde_json::Value) -> Bytes {
    Bytes::from(serde_json::to_vec(&v).expect("JSON"))
}

/// The writes of one repository: its images (config and layers, manifest, links) and its tag
/// index with `tags` tags (`None`: one tag per tagged manifest, `m<i>`).
fn repository(a: &GrowArgs, name: &Name, seed: &str, tags: Option<usize>) -> Vec<Put> {
    let mut puts = Vec::new();
    let mut targets = Vec::new();
    puts.push(Put {
        key: layout::repository_marker(name),
        bytes: Bytes::from_static(b"{}"),
        create: true,
    });
    for m in 0..a.manifests {
        let mut descs = Vec::new();
        for l in 0..=a.layers {
            let bytes = Bytes::from(format!("{seed} manifest {m} blob {l}\n"));
            let d = Digest::sha256(&bytes);
            let (kind, mt) = if l == 0 {
                ("config", CONFIG_TYPE)
            } else {
                ("layer", LAYER_TYPE)
            };
            descs.push((
                kind,
                json!({"mediaType": mt, "digest": d.to_string(), "size": bytes.len()}),
            ));
            puts.push(Put {
                key: layout::blob_link(name, &d),
                bytes: doc(json!({"size": bytes.len()})),
                create: false,
            });
            puts.push(Put {
                key: layout::blob_data(&d),
                bytes,
                create: true,
            });
        }
        let config = descs.remove(0).1;
        let layers: Vec<_> = descs.into_iter().map(|(_, d)| d).collect();
        let manifest = doc(json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": config,
            "layers": layers,
        }));
        let md = Digest::sha256(&manifest);
        let size = manifest.len();
        puts.push(Put {
            key: layout::manifest_link(name, &md),
            bytes: doc(json!({"mediaType": MANIFEST_TYPE, "size": size})),
            create: false,
        });
        puts.push(Put {
            key: layout::blob_data(&md),
            bytes: manifest,
            create: true,
        });
        let untagged = a.untagged_every > 0 && m % a.untagged_every == a.untagged_every - 1;
        if tags.is_some() || !untagged {
            targets.push((
                m,
                json!({"digest": md.to_string(), "mediaType": MANIFEST_TYPE, "size": size}),
            ));
        }
    }
    let index: serde_json::Map<String, serde_json::Value> = match tags {
        None => targets
            .into_iter()
            .map(|(m, t)| (format!("m{m}"), t))
            .collect(),
        Some(n) => (0..n)
            .map(|i| (format!("t{i:06}"), targets[i % targets.len()].1.clone()))
            .collect(),
    };
    puts.push(Put {
        key: layout::tags(name),
        bytes: doc(json!({"tags": index})),
        create: false,
    });
    puts
}

pub async fn grow(a: GrowArgs) -> anyhow::Result<serde_json::Value> {
    let store = store(&a)?;
    let started = Instant::now();
    let mut names = Vec::new();
    let mut puts = Vec::new();
    for r in 0..a.repos {
        let name = Name::parse(&format!("grow/r{r:04}"))?;
        puts.extend(repository(&a, &name, &format!("grow r{r}"), None));
        names.push(name);
    }
    if a.big_tags > 0 {
        let name = Name::parse("grow/big")?;
        puts.extend(repository(&a, &name, "grow big", Some(a.big_tags)));
        names.push(name);
    }
    let catalog: Vec<&str> = names.iter().map(Name::as_str).collect();
    let requests = puts.len() + 1;
    // Nothing reads the store while it grows, so the order of the writes does not matter.
    let results: Vec<anyhow::Result<()>> = futures_util::stream::iter(puts)
        .map(|p| {
            let store = store.clone();
            async move {
                let mode = if p.create {
                    PutMode::Create
                } else {
                    PutMode::Overwrite
                };
                match store.put(&p.key, p.bytes, mode).await {
                    Ok(_) | Err(StoreError::AlreadyExists { .. }) => Ok(()),
                    Err(e) => {
                        Err(anyhow::Error::new(e).context(format!("writing {}", p.key.as_str())))
                    }
                }
            }
        })
        .buffer_unordered(a.conc)
        .collect()
        .await;
    for r in results {
        r?;
    }
    store
        .put(
            &layout::catalog(),
            doc(json!({"repositories": catalog})),
            PutMode::Overwrite,
        )
        .await
        .context("writing the catalog")?;
    let secs = started.elapsed().as_secs_f64();
    let blobs = (a.repos + usize::from(a.big_tags > 0)) * a.manifests * (a.layers + 1);
    Ok(json!({
        "op": "grow",
        "store": store.name(),
        "repositories": names.len(),
        "manifests": (a.repos + usize::from(a.big_tags > 0)) * a.manifests,
        "blobs": blobs,
        "big_tags": a.big_tags,
        "store_writes": requests,
        "secs": secs,
        "writes_per_sec": requests as f64 / secs,
    }))
}
