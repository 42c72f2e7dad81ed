//! Refusal logs under a flood: sampled per key and limit, bounded overall, keys shown only as
//! keyed pseudonyms.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tollgate::{Limiter, ManualClock, MemoryStore, Policies, Request};

const POLICY: &str = r#"
policies:
  - name: login
    key: [ip]
    limits: [{ name: per-minute, algorithm: fixed_window, quota: 1/m }]
"#;

/// Log output, kept in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("the buffer").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        let bytes = self.0.lock().expect("the buffer").clone();
        String::from_utf8(bytes)
            .expect("text")
            .lines()
            .filter(|line| line.contains("refused"))
            .map(str::to_owned)
            .collect()
    }
}

/// Runs `requests` (peer addresses, and the time between them) through a limiter on a manual
/// clock and returns the refusal lines it logged.
fn logged_refusals(requests: impl Iterator<Item = (String, Duration)>) -> Vec<String> {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = MemoryStore::builder()
        .clock(Arc::new(clock.clone()))
        .build();
    let limiter = Limiter::with_policies(
        store,
        Policies::from_yaml("test.yaml", POLICY).expect("valid"),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(async {
            for (peer, gap) in requests {
                clock.advance(gap);
                let mut request = Request::new("POST", "/login");
                request.peer = Some(peer.parse().expect("an address"));
                limiter.evaluate(&request).await.expect("decided");
            }
        });
    });
    captured.lines()
}

#[test]
fn a_denial_flood_writes_a_bounded_number_of_lines() {
    // One client refused 100 000 times in 5 s: its first refusal is logged, the rest counted.
    let one_client = (0..100_001).map(|_| ("203.0.113.7".to_owned(), Duration::from_micros(50)));
    let lines = logged_refusals(one_client);
    assert_eq!(lines.len(), 1, "{lines:?}");
    // Ten seconds later the next line says how many went unlogged.
    let later = (0..3).map(|n| {
        let gap = if n == 2 { 10 } else { 0 };
        ("203.0.113.7".to_owned(), Duration::from_secs(gap))
    });
    let lines = logged_refusals(later);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].contains("unlogged_since_last=0"), "{}", lines[1]);

    // 50 000 clients, each admitted then refused, within 5 s: lines stay within the global
    // budget.
    let many = (0..100_000u32).map(|n| {
        let client = n / 2;
        let peer = format!(
            "10.{}.{}.{}",
            client >> 16,
            (client >> 8) & 0xff,
            client & 0xff
        );
        (peer, Duration::from_micros(50))
    });
    let lines = logged_refusals(many);
    assert!(
        (100..=150).contains(&lines.len()),
        "{} lines for 50 000 refused clients",
        lines.len()
    );
}

#[test]
fn hashed_keys_cannot_be_found_by_hashing_candidates() {
    let twice = (0..2).map(|_| ("203.0.113.7".to_owned(), Duration::ZERO));
    let first = logged_refusals(twice.clone());
    let second = logged_refusals(twice);
    let pseudonym = |line: &str| {
        let start = line.find("key=").expect("a key field") + 4;
        line[start..start + 16].to_owned()
    };
    let unsalted: String = Sha256::digest(b"ip:203.0.113.7")[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_ne!(pseudonym(&first[0]), unsalted, "{}", first[0]);
    assert!(!first[0].contains("203.0.113.7"), "{}", first[0]);
    assert_ne!(
        pseudonym(&first[0]),
        pseudonym(&second[0]),
        "each process keys its pseudonyms with a secret of its own"
    );
}
