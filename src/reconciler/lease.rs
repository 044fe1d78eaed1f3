//! `coordination.k8s.io` Leases as locks: one per task (its executor) and one for `serve`'s leader election.
//! Every write carries the lease's resourceVersion, so two contenders can never both believe they hold it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// The outcome of trying to take a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// We hold it now.
    Acquired,
    /// Someone else holds it; it expires in at most this long unless renewed.
    HeldBy {
        /// The holder's identity.
        holder: String,
        /// Until it may be taken over.
        expires_in: Duration,
    },
}

/// The identity of this process in executor Leases: `PREFIX@HOST/PID`, so that another druidctl process on the
/// same host can tell when the holder is gone ([`holder_is_dead_here`]) and take its lease over at once.
pub fn process_identity(prefix: &str) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    format!("{prefix}@{host}/{}", std::process::id())
}

/// Whether `identity` names a process on this host that no longer exists (its lease can be taken over at once).
pub fn holder_is_dead_here(identity: &str, own_identity: &str) -> bool {
    let host_of = |id: &str| {
        id.split_once('@').and_then(|(_, rest)| rest.rsplit_once('/')).map(|(h, p)| (h.to_string(), p.to_string()))
    };
    let (Some((host, pid)), Some((own_host, _))) = (host_of(identity), host_of(own_identity)) else { return false };
    if host != own_host {
        return false;
    }
    let Ok(pid) = pid.parse::<i32>() else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 only checks for existence; no memory is touched.
    let r = unsafe { libc::kill(pid, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// A lease used as a lock by `identity`.
#[derive(Clone)]
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    owner: Option<OwnerReference>,
    last: Arc<Mutex<Option<Lease>>>,
    /// Holders whose unexpired lease may be taken over anyway (e.g. a process on this host that is gone).
    takeover: Option<Takeover>,
    /// Try to create the lease before reading it (it most likely does not exist yet).
    create_first: bool,
}

/// Whether an unexpired lease of this holder may be taken over.
type Takeover = Arc<dyn Fn(&str) -> bool + Send + Sync>;

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// How long until `lease` expires (zero when expired or never held).
pub fn expires_in(lease: &Lease, at: jiff::Timestamp) -> Duration {
    let Some(spec) = &lease.spec else { return Duration::ZERO };
    if spec.holder_identity.as_deref().unwrap_or("").is_empty() {
        return Duration::ZERO;
    }
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else { return Duration::ZERO };
    let secs = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    let end_ms = renewed.0.as_millisecond() + secs * 1000;
    Duration::from_millis(u64::try_from(end_ms - at.as_millisecond()).unwrap_or(0))
}

impl LeaseLock {
    /// A lock on lease `namespace/name` for `identity`, valid `duration` after each renewal.
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str, duration: Duration) -> LeaseLock {
        LeaseLock {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
            owner: None,
            last: Arc::new(Mutex::new(None)),
            takeover: None,
            create_first: false,
        }
    }

    /// The lease most likely does not exist yet (a task admitted just now): the first attempt creates it
    /// without reading it first, and reads it only when it exists after all.
    pub fn probably_new(mut self, yes: bool) -> LeaseLock {
        self.create_first = yes;
        self
    }

    /// Takes the lease over from a holder for which `dead` says it can no longer renew it, without waiting for
    /// the lease to expire.
    pub fn taking_over(mut self, dead: impl Fn(&str) -> bool + Send + Sync + 'static) -> LeaseLock {
        self.takeover = Some(Arc::new(dead));
        self
    }

    /// Makes the lease owned by `owner` (garbage-collected with it) when this lock creates it.
    pub fn owned_by(mut self, owner: OwnerReference) -> LeaseLock {
        self.owner = Some(owner);
        self
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// Takes the lease if it is free, expired or already ours (transient errors are retried a few times).
    pub async fn try_acquire(&self) -> Result<Acquire, kube::Error> {
        let mut delay = Duration::from_millis(10);
        for _ in 0..3 {
            match self.try_acquire_once().await {
                Err(e) if crate::reconciler::transient(&e) => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                other => return other,
            }
        }
        self.try_acquire_once().await
    }

    fn new_lease(&self) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                owner_references: self.owner.clone().map(|o| vec![o]),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.seconds()),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        }
    }

    async fn try_acquire_once(&self) -> Result<Acquire, kube::Error> {
        if self.create_first && self.last.lock().await.is_none() {
            match self.api.create(&PostParams::default(), &self.new_lease()).await {
                Ok(l) => {
                    *self.last.lock().await = Some(l);
                    return Ok(Acquire::Acquired);
                }
                // It exists: read it and decide as usual.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        let current = self.api.get_opt(&self.name).await?;
        let Some(mut lease) = current else {
            let lease = self.new_lease();
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(l) => {
                    *self.last.lock().await = Some(l);
                    Ok(Acquire::Acquired)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    Ok(Acquire::HeldBy { holder: "(racing)".into(), expires_in: self.duration })
                }
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let left = expires_in(&lease, jiff::Timestamp::now());
        let dead = self.takeover.as_ref().is_some_and(|f| f(&holder));
        if holder != self.identity && !holder.is_empty() && left > Duration::ZERO && !dead {
            return Ok(Acquire::HeldBy { holder, expires_in: left });
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(holder != self.identity);
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.seconds()),
            acquire_time: if holder == self.identity { spec.acquire_time } else { Some(now()) },
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..spec
        });
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(l) => {
                *self.last.lock().await = Some(l);
                Ok(Acquire::Acquired)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                Ok(Acquire::HeldBy { holder: "(racing)".into(), expires_in: self.duration })
            }
            Err(e) => Err(e),
        }
    }

    /// Renews the lease; `Ok(false)` when it is no longer ours.
    pub async fn renew(&self) -> Result<bool, kube::Error> {
        let mut last = self.last.lock().await;
        let Some(mut lease) = last.clone() else { return Ok(false) };
        if let Some(spec) = lease.spec.as_mut() {
            spec.renew_time = Some(now());
        }
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(l) => {
                *last = Some(l);
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                // Someone wrote it: still ours only if the holder is unchanged and it has not expired.
                let fresh = self.api.get_opt(&self.name).await?;
                match fresh {
                    Some(l)
                        if l.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
                            == Some(self.identity.as_str()) =>
                    {
                        *last = Some(l);
                        drop(last);
                        Box::pin(self.renew()).await
                    }
                    _ => {
                        *last = None;
                        Ok(false)
                    }
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up so another contender can take it at once (best effort).
    pub async fn release(&self) {
        let mut last = self.last.lock().await;
        if let Some(mut lease) = last.take()
            && let Some(spec) = lease.spec.as_mut()
        {
            spec.holder_identity = None;
            spec.renew_time = Some(now());
            if let Err(e) = self.api.replace(&self.name, &PostParams::default(), &lease).await {
                tracing::debug!(lease = %self.name, error = %e, "lease not released; it will expire");
            }
        }
    }

    /// Renews in the background every fifth of the duration until `stop` fires; cancels the returned token
    /// when the lease is lost (or cannot be renewed before it would expire).
    pub fn keep_renewed(&self, stop: CancellationToken) -> CancellationToken {
        let lost = CancellationToken::new();
        let (lock, lost2) = (self.clone(), lost.clone());
        tokio::spawn(async move {
            let period = lock.duration / 5;
            let mut last_ok = tokio::time::Instant::now();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(period) => {}
                }
                match lock.renew().await {
                    Ok(true) => {
                        last_ok = tokio::time::Instant::now();
                        super::controller::API_OUTAGE.ok();
                    }
                    Ok(false) => {
                        lost2.cancel();
                        return;
                    }
                    Err(e) => {
                        // Not reaching the API server is the process's outage, logged once; an answer that is an
                        // error is about this lease.
                        if matches!(e, kube::Error::Api(_)) {
                            tracing::debug!(lease = %lock.name, error = %e, "lease renewal failed; retrying");
                        } else {
                            super::controller::API_OUTAGE.failed(&format!("renewing lease {}", lock.name), &e);
                        }
                        // Stop acting before the lease could expire and be taken over.
                        if last_ok.elapsed() + period >= lock.duration {
                            lost2.cancel();
                            return;
                        }
                    }
                }
            }
        });
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_counts_from_the_last_renewal() {
        let t0 = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let lease = |holder: Option<&str>| Lease {
            metadata: Default::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(t0)),
                ..Default::default()
            }),
        };
        assert_eq!(expires_in(&lease(Some("a")), t0), Duration::from_secs(15));
        assert_eq!(expires_in(&lease(Some("a")), t0 + jiff::SignedDuration::from_secs(10)), Duration::from_secs(5));
        assert_eq!(expires_in(&lease(Some("a")), t0 + jiff::SignedDuration::from_secs(20)), Duration::ZERO);
        assert_eq!(expires_in(&lease(None), t0), Duration::ZERO, "released");
    }
}
