//! `tollgate proxy` as an LLM gateway (examples/llm-gateway.yaml) in front of an OpenAI-style
//! API: streams pass through as they come, and each request is charged the tokens its response
//! reports at its end, or its estimate when the stream is cut.

mod support;

use std::time::Instant;

use support::Tollgate;
use tollgate_testkit::llm::LlmStub;

/// The example's token buckets refill this many tokens a second (100 000 and 400 000 an hour).
const OUTPUT_REFILL: f64 = 100_000.0 / 3600.0;
const INPUT_REFILL: f64 = 400_000.0 / 3600.0;

struct Gateway {
    proxy: Tollgate,
    client: reqwest::Client,
    started: Instant,
}

impl Gateway {
    fn request(
        &self,
        mode: &str,
        max_tokens: u64,
        body_bytes: usize,
        usage: (u64, u64),
    ) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}/v1/chat/completions", self.proxy.http_url()))
            .header("x-api-key", "sk-test-1")
            .header("x-max-tokens", max_tokens.to_string())
            .header("x-stub-mode", mode)
            .header("x-stub-prompt-tokens", usage.0.to_string())
            .header("x-stub-completion-tokens", usage.1.to_string())
            .body(vec![b' '; body_bytes])
    }

    /// What is left of the output and input buckets, read from a request that costs nothing.
    async fn left(&self) -> (u64, u64) {
        let response = self
            .request("header", 0, 0, (0, 0))
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 200);
        let field = response.headers()["ratelimit"]
            .to_str()
            .expect("text")
            .to_owned();
        (
            remaining(&field, "output-tokens"),
            remaining(&field, "input-tokens"),
        )
    }

    /// Waits until what is left is what `charged` leaves, give or take what the buckets have
    /// refilled since the gateway started.
    async fn settles_at(&self, charged: (u64, u64)) {
        let mut left = (0, 0);
        for _ in 0..200 {
            left = self.left().await;
            let elapsed = self.started.elapsed().as_secs_f64();
            let within = |left: u64, full: u64, charged: u64, refill: f64| {
                let least = full - charged;
                left >= least && left as f64 <= least as f64 + refill * elapsed + 1.0
            };
            if within(left.0, 100_000, charged.0, OUTPUT_REFILL)
                && within(left.1, 400_000, charged.1, INPUT_REFILL)
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("left (output, input) {left:?}: not what charging {charged:?} leaves");
    }
}

/// The `r` parameter of the limit named `name` in a `RateLimit` field.
fn remaining(field: &str, name: &str) -> u64 {
    field
        .split(',')
        .map(str::trim)
        .find(|item| item.starts_with(&format!("\"{name}\"")))
        .and_then(|item| item.split(';').find_map(|p| p.strip_prefix("r=")))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in RateLimit: {field}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_llm_gateway_charges_what_each_stream_reports_and_a_cut_stream_its_estimate() {
    let stub = LlmStub::start().await;
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/llm-gateway.yaml"
    );
    let upstream = format!("http://{}", stub.address());
    let gateway = Gateway {
        proxy: Tollgate::proxy(&["--config", example, "--upstream", &upstream]),
        client: reqwest::Client::new(),
        started: Instant::now(),
    };
    gateway.settles_at((0, 0)).await;

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
    // Meanwhile the estimates are charged: 2000 output tokens, 4000 bytes of input.
    gateway.settles_at((2000, 4000)).await;
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
    gateway.settles_at((42, 90)).await;

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
    gateway.settles_at((42 + 500 + 3, 90 + 300 + 7)).await;
}
