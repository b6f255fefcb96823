//! `tablekit copy --verify` between two emulators, each behind a fault proxy that resets
//! connections, drops responses of requests it forwarded, answers 503 and delays requests:
//! the destination ends with exactly the source's entities.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;
use tablekit::azure::Account;
use tablekit::core::Properties;
use tablekit_testkit::{Azurite, Fault, FaultProxy, Matcher, Occurrences, Rule};

/// A proxy in front of the table endpoint of `endpoints`, and the connection string that
/// reaches the emulator's table service through it.
fn proxy_for(endpoints: &tablekit_testkit::Endpoints) -> (FaultProxy, String) {
    let authority = endpoints
        .table
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("table endpoint authority");
    let proxy = FaultProxy::start(authority.parse().expect("loopback address")).expect("proxy");
    let cs = connection_string(
        &endpoints
            .clone()
            .with_table(proxy.endpoint_for(&endpoints.table)),
    );
    (proxy, cs)
}

fn rule(matcher: &Matcher, occurrences: Occurrences, fault: Fault) -> Rule {
    Rule::new(matcher.clone(), occurrences, fault)
}

/// Every entity of a table by keys, with its properties (and so their EDM types).
async fn by_keys(account: &Account, name: &str) -> BTreeMap<(String, String), Properties> {
    let table = account.table(name).expect("table name");
    let rows = contents(&table).await;
    let n = rows.len();
    let map: BTreeMap<_, _> = rows.into_iter().map(|(pk, rk, p)| ((pk, rk), p)).collect();
    assert_eq!(map.len(), n, "no key read twice");
    map
}

#[tokio::test]
async fn a_copy_between_two_emulators_under_faults_loses_and_duplicates_nothing() {
    // 3,000 entities of every EDM type in 6 partitions of 500, written straight to the
    // source emulator (not through its proxy).
    let src = table("CliFaultSrc").await;
    seed(&src, 6, 500).await;

    let second = Azurite::builder().start().expect("a second emulator");
    let (src_proxy, src_cs) = proxy_for(&emulator());
    let (dst_proxy, dst_cs) = proxy_for(second.endpoints());

    // Reads of both tables (pages of 200, so the copy and the verification send dozens of
    // queries): each fault kind several times.
    let reads = Matcher::any().with_method("GET");
    for proxy in [&src_proxy, &dst_proxy] {
        proxy.add_rule(rule(&reads, Occurrences::Nth(2), Fault::Reset));
        proxy.add_rule(rule(&reads, Occurrences::Nth(3), Fault::DropResponse));
        proxy.add_rule(rule(&reads, Occurrences::Nth(5), Fault::Status(503)));
        proxy.add_rule(rule(
            &reads,
            Occurrences::Range(6, 7),
            Fault::Delay(Duration::from_millis(300)),
        ));
        proxy.add_rule(rule(&reads, Occurrences::Nth(9), Fault::Reset));
        proxy.add_rule(rule(&reads, Occurrences::Nth(11), Fault::DropResponse));
    }
    // The destination's table creation is applied and its response lost: the retry meets
    // 409 TableAlreadyExists.
    dst_proxy.add_rule(rule(
        &Matcher::any()
            .with_method("POST")
            .with_path_contains("/Tables"),
        Occurrences::Nth(1),
        Fault::DropResponse,
    ));
    // The destination's transactions: applied with the response lost (the upserts are sent
    // again), reset before they reach the service, refused with 503, delayed.
    let batches = Matcher::any()
        .with_method("POST")
        .with_path_contains("$batch");
    dst_proxy.add_rule(rule(&batches, Occurrences::Nth(2), Fault::DropResponse));
    dst_proxy.add_rule(rule(&batches, Occurrences::Nth(4), Fault::Reset));
    dst_proxy.add_rule(rule(&batches, Occurrences::Nth(6), Fault::Status(503)));
    dst_proxy.add_rule(rule(
        &batches,
        Occurrences::Range(8, 9),
        Fault::Delay(Duration::from_millis(300)),
    ));
    dst_proxy.add_rule(rule(&batches, Occurrences::Nth(12), Fault::DropResponse));
    dst_proxy.add_rule(rule(&batches, Occurrences::Nth(16), Fault::Reset));
    dst_proxy.add_rule(rule(&batches, Occurrences::Nth(20), Fault::Status(503)));

    let dir = scratch("copy-faults");
    let run = run_on(
        &src_cs,
        &[
            "--verbose",
            "copy",
            src.name(),
            "--dst-connection-string",
            &dst_cs,
            "--create",
            "--split",
            "3",
            "--page-size",
            "200",
            "--verify",
            "--checkpoint",
            arg(&dir.join("copy.checkpoint")),
        ],
    )
    .expect(0);
    assert!(
        run.stderr.contains("copied 3000 entities") && run.stderr.contains("unknown 0"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("verified 6 partitions (3000 source entities): 0 differ"),
        "{}",
        run.stderr
    );
    let (src_faults, dst_faults) = (
        src_proxy.stats().faults_injected,
        dst_proxy.stats().faults_injected,
    );
    for faults in [src_faults, dst_faults] {
        assert!(
            faults.reset > 0 && faults.drop_response > 0 && faults.status > 0 && faults.delay > 0,
            "every fault kind was injected: source {src_faults:?}, destination {dst_faults:?}"
        );
    }
    drop((src_proxy, dst_proxy));

    // Read both sides directly: the same keys, each once, with equal properties and types.
    let source = by_keys(&account(), src.name()).await;
    let dst_account = Account::from_connection_string(&second.connection_string())
        .expect("second emulator's connection string");
    let destination = by_keys(&dst_account, src.name()).await;
    assert_eq!(source.len(), 3000);
    assert_eq!(
        destination.len(),
        source.len(),
        "nothing lost, nothing added"
    );
    for (keys, props) in &source {
        let copied = destination
            .get(keys)
            .unwrap_or_else(|| panic!("{keys:?} missing in the destination"));
        assert_eq!(copied, props, "{keys:?}: properties or their types differ");
    }
    // The values the comparison covers include the types that are easy to lose.
    let sample = &source[&(keys(3, 7).pk().to_owned(), keys(3, 7).rk().to_owned())];
    assert_eq!(
        sample.get_i64("Big").unwrap(),
        Some((1_i64 << 53) + 1 + 3 * 500 + 7)
    );
    for name in ["When", "Id", "Bytes"] {
        assert!(sample.get(name).is_some(), "{name} present");
    }
    second.stop();
}
