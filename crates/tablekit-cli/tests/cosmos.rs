//! The tool keeps the account's profile: an account whose table endpoint is a Cosmos DB one
//! gets the Cosmos DB settings (its limits checked before sending), and `--retries` only
//! changes the retry schedule.
//!
//! The binary reaches the emulator under a Cosmos DB host name through an HTTP proxy (the
//! testkit's fault proxy, which accepts absolute-form requests): the endpoint decides the
//! profile, the proxy decides where the requests go.

mod support;

use std::process::Stdio;

use support::*;
use tablekit_testkit::FaultProxy;
use tablekit_testkit::fixtures::emulator;

/// The emulator's account under a Cosmos DB table endpoint, and the proxy its requests take.
fn cosmos() -> (String, FaultProxy) {
    let upstream = emulator().table;
    let addr = upstream
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|a| a.parse().ok())
        .expect("emulator address");
    let proxy = FaultProxy::start(addr).expect("proxy");
    let cs = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;TableEndpoint=http://devstoreaccount1.table.cosmos.azure.com".to_owned();
    (cs, proxy)
}

fn run_through(proxy: &FaultProxy, cs: &str, args: &[&str]) -> Run {
    let mut command = command(cs, args);
    for var in [
        "NO_PROXY",
        "no_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        command.env_remove(var);
    }
    command
        .env("HTTP_PROXY", format!("http://{}", proxy.addr()))
        .env("http_proxy", format!("http://{}", proxy.addr()))
        .stdin(Stdio::null());
    let output = command.output().expect("run tablekit");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// With the Cosmos DB profile kept, a RowKey over 255 bytes and a reserved property name are
/// refused before any request, whatever `--retries` says. (A tool that replaced the settings
/// with the defaults sent both. The emulator cannot serve transactions under a Cosmos DB host
/// name, so what is checked is that nothing is sent.)
#[tokio::test]
async fn a_cosmos_endpoint_keeps_the_cosmos_limits_with_or_without_retries() {
    let t = table("CliCosmos").await;
    let (cs, proxy) = cosmos();
    let dir = scratch("cosmos");
    let file = dir.join("rows.jsonl");
    let long = "r".repeat(256);
    std::fs::write(
        &file,
        format!(
            "{{\"PartitionKey\":\"p\",\"RowKey\":\"{long}\"}}\n{{\"PartitionKey\":\"p\",\"RowKey\":\"ok\",\"Id\":7}}\n"
        ),
    )
    .unwrap();
    for retries in [None, Some("2")] {
        let mut args = vec!["--verbose"];
        if let Some(n) = retries {
            args.extend(["--retries", n]);
        }
        args.extend(["import", t.name(), "--in", arg(&file)]);
        let run = run_through(&proxy, &cs, &args).expect(3);
        assert!(
            run.stderr.contains("Cosmos DB"),
            "the profile is named: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains("imported 0 rows; refused 2; unknown 0"),
            "{}",
            run.stderr
        );
        assert!(
            run.stderr.contains("requests (source): 0 "),
            "nothing sent: {}",
            run.stderr
        );
        assert!(contents(&t).await.is_empty(), "{retries:?}");
    }
    // Reads go through: the emulator answers under the Cosmos DB host name.
    let listed = run_through(&proxy, &cs, &["tables", "list", "--prefix", t.name()]).expect(0);
    assert_eq!(listed.stdout.trim(), t.name(), "{}", listed.stderr);
}
