//! `tollgate-tools regions`, briefly and with small numbers: it starts its stores and servers,
//! prints its table, writes its chart, and the regions together never admit more than the quota in
//! a window. Latency and utilisation depend on the machine's timing and are not asserted.

mod support;

use support::{server_binary, tools};

/// The quota of the run, per second so that a short run spans several windows.
const QUOTA: u64 = 200;

/// `(offered, admitted)` of each window line of the table.
fn windows(table: &str) -> Vec<(u64, u64)> {
    let number = |text: &str| text.replace(',', "").parse::<u64>().expect("a number");
    table
        .lines()
        .skip_while(|line| !line.starts_with("window (UTC)"))
        .skip(1)
        .take_while(|line| !line.is_empty())
        .map(|line| {
            let columns: Vec<&str> = line.split_whitespace().collect();
            (number(columns[1]), number(columns[2]))
        })
        .collect()
}

#[test]
fn three_regions_never_admit_more_than_the_global_quota_in_a_window() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let chart = dir.path().join("regions.svg");
    let output = tools()
        .args([
            "regions",
            "--seconds",
            "4",
            "--rate",
            "600",
            "--workers",
            "16",
        ])
        .args(["--quota", &format!("{QUOTA}/s")])
        .arg("--chart")
        .arg(&chart)
        .arg("--server")
        .arg(server_binary())
        .output()
        .expect("tollgate-tools regions runs");
    let table = String::from_utf8_lossy(&output.stdout);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{table}\n{errors}");
    for region in ["eu-west", "us-east", "ap-south", "total"] {
        assert!(
            table.lines().any(|line| line.starts_with(region)),
            "no {region} row:\n{table}"
        );
    }
    let windows = windows(&table);
    assert!(windows.len() >= 4, "four seconds of 1 s windows:\n{table}");
    let offered: u64 = windows.iter().map(|(offered, _)| offered).sum();
    assert!(offered >= 2_000, "about 2 400 checks offered:\n{table}");
    for (_, admitted) in &windows {
        assert!(*admitted <= QUOTA, "above the quota in a window:\n{table}");
    }
    assert!(
        table.contains("total admitted never above the quota"),
        "{table}"
    );
    let svg = std::fs::read_to_string(&chart).expect("the chart is written");
    let document = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    assert_eq!(document.root_element().tag_name().name(), "svg");
    assert!(svg.contains("all regions"), "{svg}");
}

#[test]
fn a_missing_redis_server_is_reported_by_name() {
    let output = tools()
        .args(["regions", "--seconds", "1", "--server"])
        .arg(server_binary())
        .env("PATH", "/nonexistent")
        .output()
        .expect("tollgate-tools regions runs");
    assert!(!output.status.success());
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(
        errors.contains("global-redis: redis-server is not installed"),
        "{errors}"
    );
}

#[test]
fn a_server_binary_that_is_not_there_is_named() {
    let output = tools()
        .args([
            "regions",
            "--seconds",
            "1",
            "--server",
            "/nonexistent/tollgate",
        ])
        .output()
        .expect("tollgate-tools regions runs");
    assert!(!output.status.success());
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(
        errors.contains("--server: /nonexistent/tollgate is not a file"),
        "{errors}"
    );
}
