//! Confirming or undoing an image update, and `rdctl worker rollback`.
//!
//! After the provisioner placed and started the new zone (its switch open), the worker waits
//! for it to be ready: the provisioner's notion of up ([`Provisioner::ready`]: a zonepath
//! placed for the `dir` provisioner, the zone running and its entrypoint service online on
//! illumos), then the manifest's `[readiness]` probe when there is one (kubelet's
//! `readinessProbe`: a TCP connect, or an HTTP GET answered 200 to 399), every `period`. Ready
//! within `update_timeout` (kubelet's `progressDeadlineSeconds`): the switch is confirmed and
//! the replaced root kept as the previous one. Not ready: the switch is undone (the previous
//! root runs again, `kubectl rollout undo` done for you) and the attempt fails, so the digest
//! is tried again only after the zone's back-off.
//!
//! [`Provisioner::ready`]: crate::provision::Provisioner::ready

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use validator::{Digest, error_chain};

use super::{Worker, ZoneError};
use crate::config::ZoneSpec;
use crate::state::{Phase, RolledBack, now_unix};
use crate::zone::{ProbeCheck, ReadinessProbe};

/// How long one probe may take (kubelet's `timeoutSeconds` default).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Between two looks at the provisioner when the manifest has no probe.
const READY_PERIOD: Duration = Duration::from_millis(250);

/// One readiness probe: `Ok` when it passes, else what it found.
pub async fn probe(p: &ReadinessProbe) -> Result<(), String> {
    let addr = format!("{}:{}", p.host, p.port);
    let target = match &p.check {
        ProbeCheck::Tcp => format!("tcp {addr}"),
        ProbeCheck::Http { path } => format!("http GET {addr}{path}"),
    };
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(&addr)
            .await
            .map_err(|e| e.to_string())?;
        let ProbeCheck::Http { path } = &p.check else {
            return Ok(());
        };
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: rdctl-probe\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        // The status line is all that is read.
        let mut head = [0u8; 64];
        let mut n = 0;
        while n < 12 {
            let r = s.read(&mut head[n..]).await.map_err(|e| e.to_string())?;
            if r == 0 {
                break;
            }
            n += r;
        }
        let line = String::from_utf8_lossy(&head[..n]);
        let code: Option<u16> = line
            .strip_prefix("HTTP/1.")
            .and_then(|r| r.get(2..5))
            .and_then(|c| c.parse().ok());
        match code {
            Some(c) if (200..400).contains(&c) => Ok(()),
            Some(c) => Err(format!("status {c}")),
            None => Err(format!("not an HTTP answer: {:?}", line.lines().next())),
        }
    };
    match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("readiness probe {target}: {e}")),
        Err(_) => Err(format!(
            "readiness probe {target}: no answer within {}s",
            PROBE_TIMEOUT.as_secs()
        )),
    }
}

impl Worker {
    /// Waits for the zone just provisioned (its switch open) to be ready, then confirms the
    /// switch; not ready within `update_timeout`: undoes it and fails with
    /// [`ZoneError::NotReady`].
    pub(super) async fn confirm_or_undo(
        self: &Arc<Self>,
        spec: &ZoneSpec,
    ) -> Result<(), ZoneError> {
        let timeout = spec.rollout.update_timeout;
        let deadline = Instant::now() + timeout;
        let period = spec
            .rollout
            .readiness
            .as_ref()
            .map_or(READY_PERIOD, |p| p.period);
        let reason = loop {
            let me = Arc::clone(self);
            let zone = spec.name.clone();
            let up = tokio::task::spawn_blocking(move || me.provisioner.ready(&zone))
                .await
                .map_err(|e| ZoneError::Task(e.to_string()))?;
            let found = match up {
                Ok(true) => match &spec.rollout.readiness {
                    Some(p) => probe(p).await,
                    None => Ok(()),
                },
                Ok(false) => Err("the zone is not up".to_owned()),
                Err(e) => Err(error_chain(&e)),
            };
            match found {
                Ok(()) => {
                    let me = Arc::clone(self);
                    let zone = spec.name.clone();
                    return tokio::task::spawn_blocking(move || me.provisioner.confirm(&zone))
                        .await
                        .map_err(|e| ZoneError::Task(e.to_string()))?
                        .map_err(ZoneError::from);
                }
                // Not ready by the deadline (a last probe runs at the deadline itself, so a
                // zone gets all of `update_timeout`, as kubelet's progress deadline).
                Err(reason) if Instant::now() >= deadline => break reason,
                Err(_) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    tokio::time::sleep(period.min(left)).await;
                }
            }
        };
        tracing::warn!(zone = %spec.name, %reason, "the new zone is not ready; rolling back");
        let me = Arc::clone(self);
        let zone = spec.name.clone();
        let undone = tokio::task::spawn_blocking(move || me.provisioner.undo(&zone))
            .await
            .map_err(|e| ZoneError::Task(e.to_string()))??;
        Err(ZoneError::NotReady {
            reason,
            timeout,
            rolled_back: undone.is_some(),
        })
    }

    /// Carries out the rollbacks `rdctl worker rollback` asked for: the previous root runs,
    /// the current one becomes the previous root, and the zone stays there until its reference
    /// resolves to another digest. A refusal (nothing kept) is the zone's last error.
    pub(super) async fn rollbacks(self: &Arc<Self>) -> Result<(), super::WorkerError> {
        for zone in self.state.rollback_requests() {
            let mut st = self.state.load(&zone).unwrap_or_default();
            let me = Arc::clone(self);
            let z = zone.clone();
            let from = st.current_digest.clone();
            let done = tokio::task::spawn_blocking(move || {
                // A worker killed after the roots swapped but before this record was saved
                // left the request: its switch was settled at start, so the root kept is the
                // one the rollback left, and it is not done a second time (forward again).
                let kept = me.provisioner.previous(&z)?.map(|d| d.manifest_digest);
                if from.is_some() && kept == from {
                    tracing::info!(
                        zone = z,
                        "the rollback was done before a restart; recording it"
                    );
                    return Ok(());
                }
                me.provisioner.rollback(&z).map(drop)
            })
            .await;
            st.zone = zone.clone();
            st.updated_unix = now_unix();
            match done {
                Ok(Ok(())) => {
                    let from = st.current_digest.take();
                    st.current_digest = st.previous_digest.take();
                    st.previous_digest = from.clone();
                    st.rolled_back = from.map(|digest| RolledBack {
                        digest,
                        reason: "rdctl worker rollback".to_owned(),
                        manual: true,
                        at_unix: now_unix(),
                    });
                    st.phase = Phase::Ready;
                    st.last_error = None;
                    tracing::info!(zone, current = ?st.current_digest, "rolled back to the previous root");
                }
                Ok(Err(e)) => {
                    tracing::warn!(zone, error = %error_chain(&e), "rollback refused");
                    st.last_error = Some(format!("rollback: {}", error_chain(&e)));
                }
                Err(e) => st.last_error = Some(format!("rollback: internal: {e}")),
            }
            self.state.save(&st)?;
            self.state.clear_rollback_request(&zone)?;
        }
        Ok(())
    }
}

/// Whether `desired` is the digest an operator rolled the zone away from: the zone stays on
/// its previous root until the reference resolves to something else.
pub(super) fn held_back(st: &crate::state::ZoneStatus, desired: &Digest) -> bool {
    st.rolled_back
        .as_ref()
        .is_some_and(|r| r.manual && &r.digest == desired)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(port: u16, path: &str) -> ReadinessProbe {
        ReadinessProbe {
            host: "127.0.0.1".into(),
            port,
            check: ProbeCheck::Http { path: path.into() },
            period: Duration::from_millis(10),
        }
    }

    /// A one-shot HTTP server answering `status` to the first request; returns its port.
    async fn serve(status: &'static str) -> u16 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                .await;
        });
        port
    }

    #[tokio::test]
    async fn probes_pass_on_a_listener_and_2xx_3xx_and_say_what_failed() {
        let port = serve("200 OK").await;
        probe(&http(port, "/healthz")).await.unwrap();
        let port = serve("302 Found").await;
        probe(&http(port, "/")).await.unwrap();
        let port = serve("503 Service Unavailable").await;
        let e = probe(&http(port, "/healthz")).await.unwrap_err();
        assert!(
            e.contains("http GET 127.0.0.1:") && e.ends_with("/healthz: status 503"),
            "{e}"
        );
        // Nothing listens on a port just released.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let free = l.local_addr().unwrap().port();
        drop(l);
        let tcp = ReadinessProbe {
            check: ProbeCheck::Tcp,
            ..http(free, "/")
        };
        let e = probe(&tcp).await.unwrap_err();
        assert!(
            e.starts_with(&format!("readiness probe tcp 127.0.0.1:{free}: ")),
            "{e}"
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = ReadinessProbe {
            port: l.local_addr().unwrap().port(),
            ..tcp
        };
        probe(&tcp).await.unwrap();
    }
}
