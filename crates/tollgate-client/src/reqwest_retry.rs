//! The retry policy for reqwest: [`send_with_retry`] builds the request anew for each attempt.

use tokio::time::Instant;

use crate::retry::{RetryLog, RetryPolicy};

/// Sends the request `make` builds, retrying 429 and 503 by `policy`; returns the last
/// response. `make` is called once per attempt, so bodies need not be cloneable.
pub async fn send_with_retry(
    policy: &RetryPolicy,
    log: &RetryLog,
    make: impl Fn() -> reqwest::RequestBuilder,
) -> reqwest::Result<reqwest::Response> {
    let started = Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (client, request) = make().build_split();
        let request = request?;
        let method = request.method().clone();
        let response = client.execute(request).await?;
        match policy.wait_before_retry(
            attempts,
            &method,
            response.status(),
            response.headers(),
            started.elapsed(),
        ) {
            Some(wait) => {
                drop(response);
                log.pause(wait).await;
            }
            None => {
                log.record_end(response.status());
                return Ok(response);
            }
        }
    }
}
