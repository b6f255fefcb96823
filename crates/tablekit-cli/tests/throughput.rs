//! Throughput knobs: `--max-rate` makes requests wait for budget, and the summary shows
//! throttled responses and the governor's waits.

mod support;

use std::time::Duration;

use support::*;
use tablekit_testkit::ThrottleModel;
use tablekit_testkit::fixtures::proxied;

fn summary(run: &Run) -> serde_json::Value {
    let last = run.stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

#[tokio::test]
async fn max_rate_makes_requests_wait_for_budget_and_the_summary_says_so() {
    let src = table("CliRate").await;
    seed(&src, 3, 100).await;
    let dir = scratch("rate");
    let export = |out: &str, extra: &[&str]| {
        tablekit(
            &[
                &[
                    "--output",
                    "json",
                    "export",
                    src.name(),
                    "--out",
                    out,
                    "--page-size",
                    "50",
                ][..],
                extra,
            ]
            .concat(),
        )
        .expect(0)
    };
    // Without a limit, the account's target (20,000/s) leaves nothing to wait for but the
    // moments between pages; 300 entities at 100/s (one second of burst, pages read ahead)
    // wait about a second for budget, by the governor's own count.
    let free = summary(&export(arg(&dir.join("free.jsonl")), &[]));
    assert!(
        free["governor_wait_seconds"].as_f64().unwrap() < 0.1,
        "{free}"
    );
    let limited = export(arg(&dir.join("limited.jsonl")), &["--max-rate", "100"]);
    let v = summary(&limited);
    assert!(v["governor_waits"].as_u64().unwrap() > 0, "{v}");
    assert!(v["governor_wait_seconds"].as_f64().unwrap() >= 0.5, "{v}");
    assert_eq!(v["entities"], 300);
    assert_eq!(
        std::fs::read_to_string(dir.join("limited.jsonl"))
            .unwrap()
            .lines()
            .count(),
        300
    );
    // The text summary says it too.
    let text = tablekit(&[
        "export",
        src.name(),
        "--out",
        arg(&dir.join("text.jsonl")),
        "--max-rate",
        "100",
    ])
    .expect(0);
    assert!(text.stderr.contains("governor: "), "{}", text.stderr);
    tablekit(&["export", src.name(), "--out", "-", "--max-rate", "0"]).expect(2);
}

#[tokio::test]
async fn throttled_responses_are_counted_in_the_summary() {
    let p = proxied(tablekit_testkit::fixtures::fast_retries());
    let cs = connection_string(&emulator().with_table(p.table.endpoint_for(&emulator().table)));
    // A partition that serves 100 entities a second, refused with 503 Server Busy beyond.
    p.table.set_throttle(
        ThrottleModel::default()
            .with_per_partition(100.0)
            .with_burst(Duration::from_millis(500)),
    );
    let dir = scratch("throttled");
    let file = dir.join("rows.jsonl");
    let rows: String = (0..400)
        .map(|i| format!("{{\"PartitionKey\":\"hot\",\"RowKey\":\"{i:04}\",\"N\":{i}}}\n"))
        .collect();
    std::fs::write(&file, rows).unwrap();
    let name = tablekit_testkit::unique_table_name("CliThrottled");
    let run = run_on(
        &cs,
        &[
            "--output",
            "json",
            "--retries",
            "10",
            "import",
            &name,
            "--in",
            arg(&file),
            "--create",
            "--parallel",
            "8",
        ],
    )
    .expect(0);
    let v = summary(&run);
    assert_eq!(v["imported"], 400, "{v}");
    assert!(v["throttled_responses"].as_u64().unwrap() > 0, "{v}");
}
