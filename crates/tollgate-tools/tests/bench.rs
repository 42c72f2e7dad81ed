//! `tollgate-tools bench` against a real `tollgate serve`: the check API, Envoy's rate limit
//! service over gRPC, plain GETs at a fixed rate, and a server that never answers.

mod support;

use serde_json::Value;
use support::{Tollgate, run};

/// One descriptor, two checks a minute: a known split between allowed and denied.
const RLS_CONFIG: &str = "
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 2 }
";

fn write(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).expect("the file is written");
}

/// A `tollgate serve` of [`RLS_CONFIG`] with `flags` and `env`; the directory holds its
/// configuration for as long as it runs.
fn rls_server(flags: &[&str], env: &[(&str, &str)]) -> (tempfile::TempDir, Tollgate) {
    let directory = tempfile::tempdir().expect("a temporary directory");
    write(&directory.path().join("edge.yaml"), RLS_CONFIG);
    let mut args = vec!["--rls-config", directory.path().to_str().expect("UTF-8")];
    args.extend_from_slice(flags);
    let server = Tollgate::start_with_env(&tollgate_testkit::tollgate::serve_args(&args), env);
    (directory, server)
}

/// `tollgate-tools bench --target grpc` against `server` with `flags`, as JSON.
fn bench_grpc(server: &Tollgate, flags: &[&str]) -> (std::process::ExitStatus, String, String) {
    let grpc = server.address("grpc").to_string();
    let mut args = vec!["bench", "--target", "grpc", "--url", &grpc, "--json"];
    args.extend_from_slice(flags);
    run(&args)
}

#[test]
fn the_load_generator_reports_throughput_percentiles_and_the_split() {
    let (_directory, server) = rls_server(&[], &[]);
    let base = server.http_url();
    let body = r#"{"limits":[{"key":"k{key}","algorithm":"fixed_window","quota":"10/h"}]}"#;
    let (status, stdout, stderr) = run(&[
        "bench",
        "--url",
        &base,
        "--duration",
        "500ms",
        "--concurrency",
        "4",
        "--keys",
        "2",
        "--body",
        body,
    ]);
    assert!(status.success(), "{stderr}");
    assert!(
        stdout.contains("allowed 20 ("),
        "two keys of ten each: {stdout}"
    );
    for field in ["requests", "p50", "p90", "p99", "p99.9", "distribution"] {
        assert!(stdout.contains(field), "{field}: {stdout}");
    }

    let (status, stdout, stderr) = bench_grpc(&server, &["--duration", "300ms", "--keys", "1"]);
    assert!(status.success(), "{stderr}");
    let summary: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(
        summary["allowed"], 2,
        "one address, two a minute: {summary}"
    );
    assert_eq!(summary["failed"], 0);
    assert!(summary["denied"].as_u64().expect("a count") > 0);

    let (status, stdout, stderr) = run(&[
        "bench",
        "--target",
        "get",
        "--url",
        &format!("{base}/healthz"),
        "--duration",
        "200ms",
        "--rate",
        "500",
        "--json",
    ]);
    assert!(status.success(), "{stderr}");
    let summary: Value = serde_json::from_str(&stdout).expect("JSON");
    let requests = summary["requests"].as_u64().expect("a count");
    assert!(
        requests <= 100,
        "a fixed rate sends no more than scheduled: {summary}"
    );

    let (status, _, stderr) = run(&[
        "bench",
        "--url",
        "http://127.0.0.1:1",
        "--duration",
        "100ms",
    ]);
    assert!(!status.success());
    assert!(stderr.contains("no request was answered"), "{stderr}");
}

/// A call the rate limit service refuses counts as failed, with the status and message it gave.
#[test]
fn a_refused_grpc_call_is_reported_with_its_status() {
    let (_directory, server) = rls_server(&[], &[]);
    let (status, _, stderr) = bench_grpc(
        &server,
        &["--domain", "", "--duration", "100ms", "--keys", "1"],
    );
    assert!(!status.success());
    assert!(
        stderr.contains(
            "no request was answered: gRPC status 3: rate limit domain must not be empty"
        ),
        "{stderr}"
    );
}

/// A server that asks its connections to go away (here every 200 ms, their maximum age) does
/// not fail the run: the generator opens them again.
#[test]
fn grpc_connections_the_server_closes_are_opened_again() {
    let (_directory, server) = rls_server(
        &["--max-connection-age", "200ms"],
        &[("TOLLGATE_LOG", "tollgate_http=debug")],
    );
    let (status, stdout, stderr) = bench_grpc(
        &server,
        &[
            "--connections",
            "2",
            "--concurrency",
            "4",
            "--duration",
            "1500ms",
        ],
    );
    assert!(status.success(), "{stderr}");
    let summary: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(summary["failed"], 0, "{summary}");
    // Both connections the run opened first were asked to go away during it.
    let aged = server
        .stderr()
        .matches("closing a connection at its maximum age")
        .count();
    assert!(aged >= 2, "{aged} connections closed at their age");
}
