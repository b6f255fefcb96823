//! Scenario 3: the emulator is stopped (gracefully, with disk persistence) and restarted in the
//! middle of a write load. The client reports the writes that failed, nothing it acknowledged
//! is lost, and re-running the failed writes converges.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tablekit_azure::{Account, RetryPolicy, Settings};
use tablekit_core::{Entity, Keys, Properties};
use tablekit_testkit::{Azurite, unique_table_name};

#[tokio::test]
async fn acknowledged_writes_survive_a_restart_and_a_rerun_converges() {
    let dir = std::env::temp_dir().join(unique_table_name("azuritedata"));
    let azurite = Azurite::builder()
        .with_disk_persistence(&dir)
        .start()
        .unwrap();
    let ports = azurite.ports();
    let settings = Settings::default()
        .with_retry(RetryPolicy::exponential(
            3,
            Duration::from_millis(20),
            Duration::from_millis(50),
        ))
        .with_request_timeout(Duration::from_secs(5));
    let account = Account::from_connection_string(&azurite.connection_string())
        .unwrap()
        .with_settings(settings)
        .unwrap();
    let table = account.table(&unique_table_name("restart")).unwrap();
    table.create().await.unwrap();

    let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
    let failed = Arc::new(Mutex::new(BTreeSet::new()));
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (table, acknowledged, failed) =
                (table.clone(), acknowledged.clone(), failed.clone());
            tokio::spawn(async move {
                for i in 0..150 {
                    let rk = format!("{w}-{i:04}");
                    let entity = Entity::new(
                        Keys::new("load", rk.as_str()).unwrap(),
                        Properties::new().with("I", i),
                    );
                    match table.upsert_replace(&entity).await {
                        Ok(_) => acknowledged.lock().unwrap().insert(rk),
                        Err(_) => failed.lock().unwrap().insert(rk),
                    };
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(400)).await;
    azurite.stop_gracefully(Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(600)).await;
    let azurite = Azurite::builder()
        .with_disk_persistence(&dir)
        .with_ports(ports[0], ports[1], ports[2])
        .start()
        .unwrap();
    for w in writers {
        w.await.unwrap();
    }
    let (acknowledged, failed) = (
        acknowledged.lock().unwrap().clone(),
        failed.lock().unwrap().clone(),
    );
    assert!(
        !failed.is_empty(),
        "writes during the outage are reported as failures"
    );

    let stored: BTreeSet<String> = table
        .query::<Properties>()
        .collect()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.keys.rk().to_owned())
        .collect();
    let lost: Vec<&String> = acknowledged.difference(&stored).collect();
    assert!(
        lost.is_empty(),
        "acknowledged writes lost across the restart: {lost:?}"
    );

    for rk in &failed {
        table
            .upsert_replace(&Entity::new(
                Keys::new("load", rk.as_str()).unwrap(),
                Properties::new().with("Retried", true),
            ))
            .await
            .unwrap();
    }
    let after = table.query::<Properties>().collect().await.unwrap().len();
    assert_eq!(after, 8 * 150, "the re-run converges to every write");
    println!(
        "scenario 3: {} writes acknowledged, {} failed during the restart, 0 acknowledged lost, {after} stored after the re-run",
        acknowledged.len(),
        failed.len()
    );
    drop(azurite);
    let _ = std::fs::remove_dir_all(dir);
}
