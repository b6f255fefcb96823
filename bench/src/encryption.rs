//! Workload 11: the bulk load of workload 1 with client-side encryption of three string
//! properties (`Name`, `Email`, `Notes`: AES-256-GCM under a fresh content key per entity,
//! wrapped by a local AES key), against the same load in plain. The two alternate, as in the
//! other workloads, so drift in the emulator's speed affects both alike.

use std::sync::Arc;

use serde::Serialize;
use tablekit_azure::{Account, BulkOptions};
use tablekit_encryption::{AesKeyWrap, EncryptionPolicy};

use crate::measure::{Figure, process_cpu, timed};
use crate::report::{Check, ratio};
use crate::workloads::{RUNS, Result, Sizes, err, fresh_table, operations};

/// The properties of the benchmark entity that are encrypted.
const ENCRYPTED: [&str; 3] = ["Name", "Email", "Notes"];

/// Throughput and client CPU of the plain and the encrypted bulk load.
#[derive(Debug, Serialize)]
pub(crate) struct Encryption {
    pub(crate) plain: Figure,
    pub(crate) encrypted: Figure,
    pub(crate) plain_cpu_us: Figure,
    pub(crate) encrypted_cpu_us: Figure,
}

pub(crate) async fn encryption(account: &Account, s: Sizes) -> Result<Encryption> {
    let kek = AesKeyWrap::new("bench-kek", &[7u8; 32]).map_err(err)?;
    let policy = EncryptionPolicy::builder(Arc::new(kek))
        .properties(ENCRYPTED)
        .build()
        .map_err(err)?;
    let (mut plain, mut encrypted, mut plain_cpu, mut encrypted_cpu) =
        (vec![], vec![], vec![], vec![]);
    for run in 0..=RUNS {
        let mut order = [false, true];
        if run % 2 == 1 {
            order.reverse();
        }
        for encrypt in order {
            let table = fresh_table(account, "benchenc").await?;
            let writer = if encrypt {
                policy.table(&table)
            } else {
                table.clone()
            };
            let ops = operations(s.bulk, s.bulk_partitions);
            let cpu = process_cpu();
            let (report, took) = timed(
                writer.bulk_write(ops, BulkOptions::default().with_concurrency(s.concurrency)),
            )
            .await;
            let cpu = process_cpu() - cpu;
            let report = report.map_err(err)?;
            if !report.is_complete() {
                return Err(format!(
                    "bulk load (encrypted: {encrypt}) incomplete: {:?}",
                    report.outcomes.iter().find(|o| !o.is_written())
                ));
            }
            if run > 0 {
                let (rate, cpu_us) = (
                    s.bulk as f64 / took.as_secs_f64(),
                    cpu.as_secs_f64() * 1e6 / s.bulk as f64,
                );
                if encrypt {
                    encrypted.push(rate);
                    encrypted_cpu.push(cpu_us);
                } else {
                    plain.push(rate);
                    plain_cpu.push(cpu_us);
                }
            }
            table.delete_table().await.map_err(err)?;
        }
    }
    Ok(Encryption {
        plain: Figure::of(plain, "entities/s"),
        encrypted: Figure::of(encrypted, "entities/s"),
        plain_cpu_us: Figure::of(plain_cpu, "µs/entity"),
        encrypted_cpu_us: Figure::of(encrypted_cpu, "µs/entity"),
    })
}

/// The check: the encrypted load keeps at least 0.8× the plain load's throughput in the same
/// run (both at the emulator's ceiling, so the difference is the client's encryption work).
pub(crate) fn checks(e: &Encryption) -> Vec<Check> {
    let r = ratio(&e.encrypted, &e.plain);
    vec![Check {
        criterion: "encrypted bulk load ≥ 0.8× the plain one".into(),
        measured: format!(
            "{r:.2}× (client CPU {:.1} vs {:.1} µs/entity)",
            e.encrypted_cpu_us.median, e.plain_cpu_us.median
        ),
        pass: r >= 0.8,
    }]
}

/// The workload's table for the report.
pub(crate) fn section(e: &Encryption, s: &Sizes) -> String {
    format!(
        "\n11. Client-side encryption: the bulk load of workload 1 ({} entities / {} partitions) with {} encrypted (AES-256-GCM, a content key per entity wrapped by a local AES key) vs plain.\n\n\
         | Figure | encrypted | plain | ratio |\n|---|---|---|---|\n\
         | throughput | {} | {} | {:.2}× |\n\
         | client CPU per entity | {} | {} | {:.2}× |\n",
        s.bulk,
        s.bulk_partitions,
        ENCRYPTED.join(", "),
        e.encrypted.show(),
        e.plain.show(),
        ratio(&e.encrypted, &e.plain),
        e.encrypted_cpu_us.show(),
        e.plain_cpu_us.show(),
        ratio(&e.encrypted_cpu_us, &e.plain_cpu_us),
    )
}
