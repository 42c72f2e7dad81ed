use std::sync::Arc;
use tollgate::*;
fn main() {
    let limit = Limit::new("gcra", Algorithm::Gcra, "10000/10ms".parse().unwrap()).unwrap();
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = MemoryStore::builder().clock(Arc::new(clock.clone())).build();
    let mut n = 0u64;
    for _ in 0..20_000_000u64 {
        clock.advance_micros(1);
        let v = store.decide(&Check::one("user:1", &limit), clock.now()).unwrap();
        n += v.is_allowed() as u64;
    }
    println!("{n}");
}
