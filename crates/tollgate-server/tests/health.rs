//! Health as envoyproxy/ratelimit's deployments probe it: `grpc.health.v1.Health` with the
//! service name `ratelimit`, and `GET /healthcheck`.

mod support;

use support::{Tollgate, eventually};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

async fn connect(address: &str) -> HealthClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .expect("a URL")
        .connect()
        .await
        .expect("gRPC connects");
    HealthClient::new(channel)
}

async fn status(
    client: &mut HealthClient<tonic::transport::Channel>,
    name: &str,
) -> Result<i32, tonic::Code> {
    client
        .check(HealthCheckRequest {
            service: name.to_owned(),
        })
        .await
        .map(|answer| answer.into_inner().status)
        .map_err(|status| status.code())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_answers_upstreams_health_probes() {
    let server = Tollgate::serve(&[]);
    let answer = reqwest::get(format!("{}/healthcheck", server.http_url()))
        .await
        .expect("an answer");
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().await.expect("a body"), "OK");
    let mut client = connect(&server.address("grpc").to_string()).await;
    let serving = Ok(ServingStatus::Serving as i32);
    assert_eq!(status(&mut client, "ratelimit").await, serving);
    assert_eq!(status(&mut client, "").await, serving);
    assert_eq!(
        status(&mut client, "something-else").await,
        Err(tonic::Code::NotFound)
    );
}

#[tokio::test]
async fn once_asked_to_stop_both_say_not_serving() {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (health, stopping, _reporter) = tollgate_http::health::service(async move {
        let _ = stopped.await;
    })
    .await;
    let address = support::serve_grpc(tonic::service::Routes::new(health)).await;
    let mut client = connect(&address.to_string()).await;
    assert_eq!(
        status(&mut client, "ratelimit").await,
        Ok(ServingStatus::Serving as i32)
    );
    assert!(!stopping.is_set());
    stop.send(()).expect("the health service waits");
    eventually("the stop is seen", || {
        let stopping = stopping.clone();
        async move { stopping.is_set() }
    })
    .await;
    for name in ["ratelimit", ""] {
        let mut client = client.clone();
        eventually("not serving", || {
            let mut client = client.clone();
            async move { status(&mut client, name).await == Ok(ServingStatus::NotServing as i32) }
        })
        .await;
        assert_eq!(
            status(&mut client, name).await,
            Ok(ServingStatus::NotServing as i32)
        );
    }
}

/// With `--shutdown-delay`, a SIGTERM turns readiness off at once while the listeners keep
/// answering, so that load balancers move away before anything is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_the_shutdown_delay_the_server_is_unready_yet_answers() {
    let mut server = Tollgate::serve(&["--shutdown-delay", "10m"]);
    let base = server.http_url();
    let admin = format!("http://{}", server.address("admin"));
    server.signal("TERM");
    server.wait_for_log("draining: not ready, still serving for 600s before closing");
    for url in [format!("{base}/readyz"), format!("{admin}/readyz")] {
        let unready = reqwest::get(&url).await.expect("an answer");
        assert_eq!(unready.status(), 503, "{url}");
        let problem: serde_json::Value = unready.json().await.expect("JSON");
        assert_eq!(problem["detail"], "not ready: the process is stopping");
    }
    let upstream_probe = reqwest::get(format!("{base}/healthcheck"))
        .await
        .expect("an answer");
    assert_eq!(upstream_probe.status(), 500);
    let mut client = connect(&server.address("grpc").to_string()).await;
    assert_eq!(
        status(&mut client, "ratelimit").await,
        Ok(ServingStatus::NotServing as i32)
    );
    // Checks are still decided, on a new connection too.
    let answer = reqwest::Client::new()
        .post(format!("{base}/v1/check"))
        .json(&serde_json::json!({"limits": [{"key": "k", "algorithm": "gcra", "quota": "5/s"}]}))
        .send()
        .await
        .expect("an answer");
    assert_eq!(answer.status(), 200);
    let answer: serde_json::Value = answer.json().await.expect("JSON");
    assert_eq!(answer["allowed"], true);
    server.signal("KILL");
    let _ = tokio::task::spawn_blocking(move || server.wait()).await;
}
