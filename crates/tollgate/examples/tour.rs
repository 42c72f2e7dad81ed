//! A tour of the six algorithms on the embedded memory store: the same quota, the same burst,
//! and what each one admits. Run with `cargo run -p tollgate --example tour`.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{Algorithm, Check, LeakyMode, Limit, Limiter, ManualClock, MemoryStore, Outcome};

/// A burst of 25 requests at once, then one request every 50 ms for two seconds.
fn traffic() -> Vec<Duration> {
    let burst = std::iter::repeat_n(Duration::ZERO, 25);
    let steady = (1..=40).map(|n| Duration::from_millis(50 * n));
    burst.chain(steady).collect()
}

fn limit(algorithm: Algorithm) -> Result<Limit, tollgate::Error> {
    let quota = "10/s".parse()?;
    let mut builder = Limit::builder(algorithm.as_str(), algorithm, quota);
    if algorithm == Algorithm::LeakyBucket {
        builder = builder.mode(LeakyMode::Queue { delay_after: 1 });
    }
    Ok(builder.build()?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), tollgate::Error> {
    println!(
        "Quota 10/s. Traffic: a burst of 25 requests, then one every 50 ms for 2 s (65 in all).\n"
    );
    println!(
        "{:<15} {:>8} {:>7} {:>7} {:>20}",
        "algorithm", "admitted", "delayed", "denied", "first denial retries"
    );
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new(1_700_000_000_000_000);
        let store = MemoryStore::builder()
            .clock(Arc::new(clock.clone()))
            .build();
        let limiter = Limiter::new(store);
        let limit = limit(algorithm)?;
        let (mut admitted, mut delayed, mut denied, mut first_retry) = (0, 0, 0, None);
        let mut elapsed = Duration::ZERO;
        for at in traffic() {
            clock.advance(at - elapsed);
            elapsed = at;
            match limiter
                .check(&Check::one("client", &limit))
                .await?
                .outcome()
            {
                Outcome::Allow => admitted += 1,
                Outcome::Delay(_) => delayed += 1,
                Outcome::Deny { retry_after } => {
                    denied += 1;
                    first_retry = first_retry.or(retry_after);
                }
            }
        }
        let retry = first_retry.map_or("-".to_owned(), |wait| format!("after {wait:?}"));
        println!(
            "{:<15} {admitted:>8} {delayed:>7} {denied:>7} {retry:>20}",
            algorithm.as_str()
        );
    }
    println!("\nThe leaky bucket runs in queue mode here: it delays instead of admitting at once.");
    Ok(())
}
