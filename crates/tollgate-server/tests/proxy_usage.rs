//! `tollgate proxy` as an LLM gateway (examples/llm-gateway.yaml) in front of an OpenAI-style
//! API: streams pass through as they come, and each request is charged the tokens its response
//! reports at its end, or its estimate when the stream is cut.

mod support;

use std::time::Instant;

use support::Tollgate;
use tollgate_testkit::llm::{Caller, LlmStub};

/// The example's token buckets refill this many tokens a second (100 000 and 400 000 an hour).
const OUTPUT_REFILL: f64 = 100_000.0 / 3600.0;
const INPUT_REFILL: f64 = 400_000.0 / 3600.0;

/// Waits until what is left is what `charged` leaves, give or take what the buckets have
/// refilled since `started`.
async fn settles_at(caller: &Caller, started: Instant, charged: (u64, u64)) {
    caller
        .left_until(&format!("what charging {charged:?} leaves"), |left| {
            let elapsed = started.elapsed().as_secs_f64();
            let within = |left: u64, full: u64, charged: u64, refill: f64| {
                let least = full - charged;
                left >= least && left as f64 <= least as f64 + refill * elapsed + 1.0
            };
            within(left.0, 100_000, charged.0, OUTPUT_REFILL)
                && within(left.1, 400_000, charged.1, INPUT_REFILL)
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_llm_gateway_charges_what_each_stream_reports_and_a_cut_stream_its_estimate() {
    let stub = LlmStub::start().await;
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/llm-gateway.yaml"
    );
    let upstream = format!("http://{}", stub.address());
    let proxy = Tollgate::proxy(&["--config", example, "--upstream", &upstream]);
    let started = Instant::now();
    let gateway = Caller::new(
        &proxy.http_url(),
        "sk-test-1",
        ("output-tokens", "input-tokens"),
    )
    .inspecting(&format!("http://{}", proxy.address("admin")));
    settles_at(&gateway, started, (0, 0)).await;

    // A stream arrives piece by piece while the upstream still holds its end back.
    let mut held = gateway
        .request("hold", 2000, 4000, (90, 42))
        .send()
        .await
        .expect("the head of the answer");
    assert_eq!(held.status(), 200);
    let first = held
        .chunk()
        .await
        .expect("readable")
        .expect("a first piece");
    assert!(first.starts_with(b": keep"), "{first:?}");
    // Meanwhile the estimates are charged: the most output a request may produce, and 4000
    // bytes of input.
    settles_at(&gateway, started, (4096, 4000)).await;
    stub.release(1);
    let mut rest = Vec::new();
    while let Some(piece) = held.chunk().await.expect("readable") {
        rest.extend_from_slice(&piece);
    }
    assert!(
        rest.ends_with(b"data: [DONE]\n\n"),
        "{}",
        String::from_utf8_lossy(&rest)
    );
    settles_at(&gateway, started, (42, 90)).await;

    // A stream cut before its usage keeps its estimate.
    let cut = gateway
        .request("cut", 500, 300, (90, 42))
        .send()
        .await
        .expect("the head of the answer");
    assert!(cut.text().await.is_err(), "the stream is cut");
    let after = gateway
        .request("stream", 100, 10, (7, 3))
        .send()
        .await
        .expect("an answer");
    assert_eq!(after.status(), 200);
    after.text().await.expect("the whole stream");
    settles_at(&gateway, started, (42 + 4096 + 3, 90 + 300 + 7)).await;
    // What the responses reported is counted by policy; the cut stream reported nothing.
    let metrics = reqwest::get(format!("http://{}/metrics", proxy.address("admin")))
        .await
        .expect("an answer")
        .text()
        .await
        .expect("text");
    let units = |policy: &str| -> Option<f64> {
        let series = format!(r#"tollgate_usage_units_total{{policy="{policy}"}}"#);
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(series.as_str())?.trim().parse().ok())
    };
    assert_eq!(units("output-tokens"), Some(42.0 + 3.0), "{metrics}");
    assert_eq!(units("input-tokens"), Some(90.0 + 7.0), "{metrics}");
}
