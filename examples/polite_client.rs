//! A client that asks Tollgate before working, and one that retries 429s politely.
//!
//! With `tollgate serve` running (the README's first command):
//!
//! ```sh
//! cargo run -p tollgate-client --example polite_client
//! ```
//!
//! does twelve jobs under a limit of 5 a second, asking the check API before each and waiting
//! as long as it says when refused. Given a URL behind `tollgate proxy`, it also fetches that
//! URL twenty times through the retrying send, which waits out each 429 as advised:
//!
//! ```sh
//! cargo run -p tollgate-client --example polite_client -- http://127.0.0.1:8000/
//! ```

use std::time::{Duration, Instant};

use tollgate_client::{InlineLimit, RetryLog, RetryPolicy, TollgateClient, send_with_retry};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = TollgateClient::new("http://127.0.0.1:8080", Duration::from_secs(2))?;
    let limits = [InlineLimit::new("example:jobs", "gcra", "5/s")];
    let started = Instant::now();
    for job in 1..=12 {
        loop {
            let answer = client.check_limits(&limits, None).await?;
            if answer.allowed {
                println!("{:>6.2}s job {job} runs", started.elapsed().as_secs_f64());
                break;
            }
            let wait = answer.retry_after().unwrap_or(Duration::from_secs(1));
            println!(
                "{:>6.2}s job {job} waits {wait:?}",
                started.elapsed().as_secs_f64()
            );
            tokio::time::sleep(wait).await;
        }
    }

    if let Some(url) = std::env::args().nth(1) {
        let http = reqwest::Client::new();
        let policy = RetryPolicy::default();
        let log = RetryLog::default();
        for _ in 0..20 {
            let response = send_with_retry(&policy, &log, || http.get(&url)).await?;
            println!(
                "{} after {} retries so far",
                response.status(),
                log.retries()
            );
        }
        println!(
            "waited {:?} in all, gave up {} times",
            log.waited(),
            log.gave_up()
        );
    }
    Ok(())
}
