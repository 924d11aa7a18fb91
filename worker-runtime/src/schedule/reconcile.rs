//! One zone's reconcile: resolve the reference (or, with `pull_policy = "Never"`, take the
//! digest already known), admit it by policy, pull under the pull controls with the unpack
//! overlapped, admit again, check the image's zone config against the operator's rules and its
//! caps against what the node has left (the pass's ledger, see `node`), and hand the verified
//! root to the provisioner.

use std::sync::Arc;

use validator::{Digest, error_chain};

use super::node::Claim;
use super::{AbortOnDrop, Outcome, Reconciled, Worker, ZoneError};
use crate::capacity::effective_request;
use crate::config::{PullPolicy, ZoneSpec};
use crate::feed::{FeedReader, LayerFeed};
use crate::provision::{ProvisionError, check_zone_policy};
use crate::pull::{PullError, fetch_layers, pull_documents, resolve};
use crate::state::{Phase, ZoneStatus, now_unix};
use crate::verify::{build_root, build_root_from};

static STAGING_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The dataset quota of a zone on the ZFS layer store: the zone manifest's `limits.disk`
/// (checked when the manifest was read), else the image manifest's
/// [`crate::zfs::QUOTA_ANNOTATION`] (`10G`, `512m`); an unreadable annotation refuses the zone.
fn zone_quota(
    zone: &str,
    disk: Option<&str>,
    image: &crate::verify::PulledImage,
) -> Result<Option<u64>, ZoneError> {
    if let Some(b) = disk.and_then(crate::capacity::size_bytes) {
        return Ok(Some(b));
    }
    let Some(v) = image.manifest.annotations.get(crate::zfs::QUOTA_ANNOTATION) else {
        return Ok(None);
    };
    match crate::capacity::size_bytes(v) {
        Some(b) if b > 0 => Ok(Some(b)),
        _ => Err(ProvisionError::Config {
            zone: zone.to_owned(),
            field: "manifest annotations",
            reason: format!(
                "{}={v:?} is not a size like 512m or 10G",
                crate::zfs::QUOTA_ANNOTATION
            ),
        }
        .into()),
    }
}

impl Worker {
    /// One zone: resolve, pull, verify, check, provision. Returns the resolved digest.
    /// `claim` is the zone's part of the pass's ledger: its image's caps are taken there
    /// before the zone is made.
    pub(super) async fn reconcile(
        self: &Arc<Self>,
        spec: &ZoneSpec,
        prev: &ZoneStatus,
        claim: &Claim,
    ) -> Result<Reconciled, (ZoneError, Option<Digest>)> {
        let current = self
            .provisioner
            .current(&spec.name)
            .map_err(|e| (e.into(), None))?;
        if matches!(
            spec.pull_policy,
            PullPolicy::IfNotPresent | PullPolicy::Never
        ) && current.is_some()
            && let Some(d) = &prev.current_digest
        {
            return Ok((Outcome::Unchanged, d.clone(), None));
        }
        let sources = self.config.mirrors.for_pull(&spec.image);
        let desired = if spec.pull_policy == PullPolicy::Never {
            // Never: no registry is asked for the image. A digest reference, or the digest
            // this node last resolved the same reference to, must be in the content store.
            let known = spec.image.digest().cloned().or_else(|| {
                (prev.image == spec.image.to_string())
                    .then(|| prev.desired_digest.clone().or(prev.current_digest.clone()))
                    .flatten()
            });
            known.ok_or_else(|| {
                (
                    PullError::NeverResolved {
                        reference: spec.image.to_string(),
                    }
                    .into(),
                    None,
                )
            })?
        } else {
            // A reference that does not resolve is a failed pull too.
            resolve(&self.client, &sources, &spec.image)
                .await
                .map_err(|e| {
                    self.metrics.pull(false);
                    (e.into(), None)
                })?
        };
        let sources = if spec.pull_policy == PullPolicy::Never {
            sources.into_local_only()
        } else {
            sources
        };
        if current.is_some() && prev.current_digest.as_ref() == Some(&desired) {
            return Ok((Outcome::Unchanged, desired, None));
        }
        // Rolled back by an operator from this digest: stays until the reference moves on.
        if current.is_some()
            && super::rollout::held_back(prev, &desired)
            && let Some(d) = &prev.current_digest
        {
            return Ok((Outcome::Unchanged, d.clone(), None));
        }
        let fail = |e: ZoneError| (e, Some(desired.clone()));
        // The policy decides on the resolved digest before any layer is fetched.
        self.admit(spec, &sources, &desired)
            .await
            .map_err(|e| fail(e.into()))?;
        let replacing = current.is_some();
        if prev.phase == Phase::Unschedulable && prev.desired_digest.as_ref() == Some(&desired) {
            // Its image's caps kept this zone out at this digest last time: decided again from
            // the image's manifest and config before any layer is fetched or unpacked, so a
            // zone that still does not fit costs two small documents a pass, not a pull and a
            // root built and thrown away. When it fits, it holds its caps from here on.
            let image = pull_documents(
                &self.client,
                &self.store,
                &sources,
                &desired,
                &self.host,
                None,
            )
            .await
            .map_err(|e| fail(e.into()))?;
            self.check_caps(spec, &image.config, claim, replacing)
                .await
                .map_err(fail)?;
        }
        let root = self
            .pull_controlled(spec, &sources, &desired)
            .await
            .map_err(fail)?;
        // Checked again right before the zone changes: a signature removed (or a policy
        // reloaded) while the layers were fetched refuses the image.
        let admission = match self.admit(spec, &sources, &desired).await {
            Ok(a) => a,
            Err(e) => {
                // Dropping the unused root removes its staging tree: off the async threads.
                let _ = tokio::task::spawn_blocking(move || drop(root)).await;
                return Err(fail(e.into()));
            }
        };
        // The operator's `[zones]` rules on what the image's label asks for, then its caps
        // against what the zones admitted before this one left: both before anything is made.
        if let Err(e) = self
            .check_caps(spec, &root.image().config, claim, replacing)
            .await
        {
            // A refused root is dropped (its staging removed) off the async threads.
            let _ = tokio::task::spawn_blocking(move || drop(root)).await;
            return Err(fail(e));
        }
        let me = Arc::clone(self);
        let spec2 = spec.clone();
        // The new root is verified and placed in staging: a replacement's downtime is the
        // provisioner's stop of the old zone through the boot of the new one.
        let t = std::time::Instant::now();
        tokio::task::spawn_blocking(move || me.provisioner.provision_unconfirmed(&spec2, root))
            .await
            .map_err(|e| fail(ZoneError::Task(e.to_string())))?
            .map_err(|e| fail(e.into()))?;
        if replacing {
            let ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
            tracing::info!(zone = %spec.name, downtime_ms = ms, "zone replaced");
            self.observe(&spec.name, |o| o.replace_downtime_ms = Some(ms));
        }
        // Ready within update_timeout, or the previous root runs again.
        self.confirm_or_undo(spec).await.map_err(fail)?;
        Ok((Outcome::Provisioned, desired, admission))
    }

    /// The operator's `[zones]` rules on the image's zone config, then the zone's request with
    /// the image's caps taken on the pass's ledger (`Unschedulable` with kubelet's reason when
    /// it does not fit in what the zones admitted before it left).
    async fn check_caps(
        &self,
        spec: &ZoneSpec,
        config: &validator::ImageConfig,
        claim: &Claim,
        replacing: bool,
    ) -> Result<(), ZoneError> {
        let caps = check_zone_policy(spec, config, &self.config.zone_policy)?;
        claim
            .reserve(effective_request(&spec.limits, Some(caps)), replacing)
            .await
            .map_err(|reason| ZoneError::Unschedulable { reason })
    }

    /// The pull under the pull controls, with the unpack overlapped: a slot of
    /// `max_parallel_pulls`, a token of the registry's bucket, progress recorded in the zone's
    /// status (every second while it runs) and in the metrics. Once the manifest and config
    /// are in, the layers download `max_concurrent_downloads` at a time while a blocking task
    /// applies them in manifest order into a staging root, each one as its bytes arrive (see
    /// the `feed` module). The slot is held until the downloads end, not for the unpack's tail.
    ///
    /// The root is returned only when every download published its blob (size and digest
    /// verified) and every DiffID matched. A download failure is the pull's error, whatever the
    /// unpack saw meanwhile. Any other failure of the overlapped unpack is checked once more
    /// by an unpack from the verified blobs, whose result stands: a layer that really breaks
    /// the image fails as it always did, and a read that raced a download that started over
    /// costs one more unpack, never a wrong root.
    async fn pull_controlled(
        self: &Arc<Self>,
        spec: &ZoneSpec,
        sources: &crate::mirrors::Sources,
        desired: &Digest,
    ) -> Result<crate::verify::VerifiedRoot, ZoneError> {
        if sources.local_only() {
            // pull_policy = "Never": every blob must be in the store already; nothing is
            // downloaded, so no slot, token or feed.
            let image = pull_documents(
                &self.client,
                &self.store,
                sources,
                desired,
                &self.host,
                None,
            )
            .await?;
            fetch_layers(&self.client, &self.store, sources, &image, None, 1, None).await?;
            let root = self
                .spawn_unpack(spec, &image, None)
                .await
                .map_err(|e| ZoneError::Task(e.to_string()))??;
            return Ok(root);
        }
        let slot = match &self.pull_slots {
            Some(s) => Some(
                s.clone()
                    .acquire_owned()
                    .await
                    .expect("the pull semaphore is never closed"),
            ),
            None => None,
        };
        self.limiter.acquire(spec.image.registry()).await;
        let progress = Arc::new(crate::throttle::PullProgress::default());
        self.metrics.pull_started(&spec.name, progress.clone());
        let me = Arc::clone(self);
        let (zone, p) = (spec.name.clone(), progress.clone());
        let ticker = AbortOnDrop(tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                let mut st = me.state.load(&zone).unwrap_or_default();
                st.zone = zone.clone();
                st.pull = Some(p.get());
                st.updated_unix = now_unix();
                if let Err(e) = me.state.save(&st) {
                    tracing::warn!(zone, error = %error_chain(&e), "recording pull progress failed");
                }
            }
        }));
        let t = std::time::Instant::now();
        let mut unpack = None;
        let pulled = async {
            let image = pull_documents(
                &self.client,
                &self.store,
                sources,
                desired,
                &self.host,
                Some(&progress),
            )
            .await?;
            let feeds = StopFeeds(
                (0..image.manifest.layers.len())
                    .map(|_| Arc::new(LayerFeed::default()))
                    .collect(),
            );
            // The ZFS layer store applies layers from the verified blobs once all are in
            // (a layer dataset is shared by every image above it: it is never fed a
            // download that could start over).
            let overlapped = self.layer_store.is_none();
            if overlapped {
                unpack = Some(self.spawn_unpack(spec, &image, Some(&feeds.0)));
            }
            fetch_layers(
                &self.client,
                &self.store,
                sources,
                &image,
                Some(&progress),
                self.config.max_concurrent_downloads,
                overlapped.then_some(&feeds.0[..]),
            )
            .await?;
            Ok::<_, PullError>(image)
        }
        .await;
        drop((ticker, slot));
        self.metrics.pull_finished(&spec.name);
        self.observe(&spec.name, |o| o.pull = Some(progress.get()));
        self.metrics.pull(pulled.is_ok());
        let took_ms = t.elapsed().as_secs_f64() * 1e3;
        tracing::info!(zone = %spec.name, %desired, took_ms, ok = pulled.is_ok(), "pull done");
        let task_err = |e: tokio::task::JoinError| ZoneError::Task(e.to_string());
        let image = match pulled {
            Ok(image) => image,
            Err(e) => {
                // The feeds are stopped: the unpack ends, removing its staging root.
                if let Some(u) = unpack {
                    let _ = u.await;
                }
                return Err(e.into());
            }
        };
        let unpack = match unpack {
            Some(u) => u,
            None => self.spawn_unpack(spec, &image, None),
        };
        match unpack.await.map_err(task_err)? {
            Ok(root) => Ok(root),
            Err(e) => {
                tracing::info!(zone = %spec.name, %desired, error = %error_chain(&e), "the unpack during the download failed; unpacking again from the verified blobs");
                Ok(self
                    .spawn_unpack(spec, &image, None)
                    .await
                    .map_err(task_err)??)
            }
        }
    }

    /// Builds a staging root for `zone` from `image` on a blocking thread: from the verified
    /// blobs in the content store, or, with `feeds`, from each layer's download as it arrives.
    fn spawn_unpack(
        self: &Arc<Self>,
        spec: &ZoneSpec,
        image: &crate::verify::PulledImage,
        feeds: Option<&[Arc<LayerFeed>]>,
    ) -> tokio::task::JoinHandle<Result<crate::verify::VerifiedRoot, ZoneError>> {
        let me = Arc::clone(self);
        let zone = spec.name.clone();
        let disk = spec.limits.disk.clone();
        let staging = self.provisioner.staging_dir().join(format!(
            "{}.{}.{}",
            zone,
            std::process::id(),
            STAGING_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let image = image.clone();
        let feeds = feeds.map(<[_]>::to_vec);
        tokio::task::spawn_blocking(move || {
            let (store, id, opts) = (&me.store, &me.config.worker_id, &me.unpack);
            if let Some(zd) = &me.layer_store {
                let quota = zone_quota(&zone, disk.as_deref(), &image)?;
                return Ok(zd.build_root(store, &staging, id, &image, opts, quota)?);
            }
            if disk.is_some() {
                // A plain directory cannot hold a quota; running without the one asked for
                // would hide that the zone is not limited.
                return Err(ProvisionError::Config {
                    zone: zone.clone(),
                    field: "limits.disk",
                    reason: "the directory layer store cannot limit a zone's disk; set [layer_store] kind = \"zfs\" in worker.toml, or remove limits.disk".to_owned(),
                }
                .into());
            }
            Ok(match feeds {
                None => build_root(store, &staging, id, &image, opts),
                Some(feeds) => build_root_from(&staging, id, &image, opts, |i, layer| {
                    let reader = FeedReader::new(
                        feeds[i].clone(),
                        store.blob_path(&layer.digest),
                        layer.size,
                    );
                    Ok(std::io::BufReader::with_capacity(256 * 1024, reader))
                }),
            }?)
        })
    }
}

/// Stops the layer feeds when the downloads are over (or dropped): an unpack waiting for bytes
/// that will not come ends instead of waiting forever. A published feed stays published.
struct StopFeeds(Vec<Arc<LayerFeed>>);

impl Drop for StopFeeds {
    fn drop(&mut self) {
        for f in &self.0 {
            f.stop();
        }
    }
}
