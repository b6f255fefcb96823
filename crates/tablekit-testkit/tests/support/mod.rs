//! A blocking HTTP/1.1 client and a scriptable upstream server for the proxy tests, written
//! independently of the proxy's own parser so one cannot hide the other's mistakes.

#![allow(dead_code, unreachable_pub)]

mod client;
mod upstream;

use std::net::SocketAddr;
use std::sync::OnceLock;

use tablekit_testkit::{Azurite, FaultProxy};

pub use client::{Client, read_message};
pub use upstream::{Step, Upstream};

/// One HTTP message as it crossed the wire: the head, the body bytes exactly as framed
/// (chunk sizes and trailers included) and the decoded body.
#[derive(Debug, Clone, Default)]
pub struct Message {
    pub head: String,
    pub raw_body: Vec<u8>,
    pub body: Vec<u8>,
}

impl Message {
    pub fn status(&self) -> u16 {
        self.head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// Whether the proxy made this response up rather than relaying upstream's.
    pub fn is_synthetic(&self) -> bool {
        self.header("x-tablekit-fault").is_some()
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Listing containers without credentials: Azurite answers 403 AuthorizationFailure.
pub const LIST: &str = "/devstoreaccount1?comp=list";
pub const TABLES: &str = "/devstoreaccount1/Tables";
pub const CONTAINER: &str = "/devstoreaccount1/proxytest?restype=container";

pub fn azurite() -> &'static Azurite {
    static AZURITE: OnceLock<Azurite> = OnceLock::new();
    AZURITE.get_or_init(|| Azurite::start().expect("Azurite for the proxy tests"))
}

pub fn proxy_to(port: u16) -> FaultProxy {
    FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], port))).unwrap()
}

pub fn blob_proxy() -> FaultProxy {
    proxy_to(azurite().ports()[0])
}

pub fn table_proxy() -> FaultProxy {
    proxy_to(azurite().ports()[2])
}

/// The response came from Azurite (which rejects the unauthenticated request), not the proxy.
pub fn assert_from_azurite(resp: &Message) {
    assert!(!resp.is_synthetic(), "{}", resp.head);
    assert_eq!(resp.status(), 403, "{}", resp.head);
    assert_eq!(resp.header("x-ms-error-code"), Some("AuthorizationFailure"));
}

/// Connections accepted, upstream connections, requests seen, forwarded, responses relayed.
pub fn counts(proxy: &FaultProxy) -> [u64; 5] {
    let s = proxy.stats();
    [
        s.connections_accepted,
        s.upstream_connections,
        s.requests_seen,
        s.requests_forwarded,
        s.responses_relayed,
    ]
}

/// Deterministic bytes that make misplaced or lost ranges visible.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
