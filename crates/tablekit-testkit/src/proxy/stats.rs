//! Counters a test reads to prove what reached the proxy and what it passed on.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Fault;

/// How many faults of each kind the proxy injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FaultCounts {
    /// [`Fault::Reset`] injections.
    pub reset: u64,
    /// [`Fault::Delay`] injections.
    pub delay: u64,
    /// [`Fault::Status`] injections.
    pub status: u64,
    /// [`Fault::DropResponse`] injections.
    pub drop_response: u64,
    /// [`Fault::Hang`] injections.
    pub hang: u64,
    /// [`Fault::SplitPage`] injections (whether or not the page was long enough to cut).
    pub split_page: u64,
}

impl FaultCounts {
    /// All injected faults together.
    pub fn total(&self) -> u64 {
        self.reset + self.delay + self.status + self.drop_response + self.hang + self.split_page
    }
}

/// A snapshot of the proxy's counters since it started or since [`super::FaultProxy::reset_stats`].
///
/// Each field is read atomically but the snapshot as a whole is not: read it when the traffic
/// you are measuring has finished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProxyStats {
    /// Client connections accepted, each counted once however many requests it carries.
    pub connections_accepted: u64,
    /// Connections the proxy opened to upstream (at most one per client connection, opened when
    /// its first request is forwarded).
    pub upstream_connections: u64,
    /// Requests whose head the proxy read, faulted or not.
    pub requests_seen: u64,
    /// Requests written to upstream completely (head and body).
    pub requests_forwarded: u64,
    /// Final (non-1xx) upstream responses passed on to the client. Each is counted as its
    /// head is sent, so the count already includes a response the client has received.
    pub responses_relayed: u64,
    /// Faults injected, by kind.
    pub faults_injected: FaultCounts,
    /// Requests refused by the throttle model ([`super::FaultProxy::set_throttle`]) through
    /// this proxy: answered 503 or 429 without being forwarded. Not counted as faults.
    pub throttled: u64,
}

/// The live counters behind [`ProxyStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) connections_accepted: AtomicU64,
    pub(crate) upstream_connections: AtomicU64,
    pub(crate) requests_seen: AtomicU64,
    pub(crate) requests_forwarded: AtomicU64,
    pub(crate) responses_relayed: AtomicU64,
    pub(crate) throttled: AtomicU64,
    reset: AtomicU64,
    delay: AtomicU64,
    status: AtomicU64,
    drop_response: AtomicU64,
    hang: AtomicU64,
    split_page: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn fault(&self, fault: Fault) {
        Self::bump(match fault {
            Fault::Reset => &self.reset,
            Fault::Delay(_) => &self.delay,
            Fault::Status(_) => &self.status,
            Fault::DropResponse => &self.drop_response,
            Fault::Hang => &self.hang,
            Fault::SplitPage { .. } => &self.split_page,
        });
    }

    fn all(&self) -> [&AtomicU64; 12] {
        [
            &self.connections_accepted,
            &self.upstream_connections,
            &self.requests_seen,
            &self.requests_forwarded,
            &self.responses_relayed,
            &self.throttled,
            &self.reset,
            &self.delay,
            &self.status,
            &self.drop_response,
            &self.hang,
            &self.split_page,
        ]
    }

    pub(crate) fn snapshot(&self) -> ProxyStats {
        let [
            conns,
            upstream,
            seen,
            forwarded,
            relayed,
            throttled,
            reset,
            delay,
            status,
            drop,
            hang,
            split_page,
        ] = self.all().map(|c| c.load(Ordering::Relaxed));
        ProxyStats {
            connections_accepted: conns,
            upstream_connections: upstream,
            requests_seen: seen,
            requests_forwarded: forwarded,
            responses_relayed: relayed,
            faults_injected: FaultCounts {
                reset,
                delay,
                status,
                drop_response: drop,
                hang,
                split_page,
            },
            throttled,
        }
    }

    pub(crate) fn reset(&self) {
        for counter in self.all() {
            counter.store(0, Ordering::Relaxed);
        }
    }
}
