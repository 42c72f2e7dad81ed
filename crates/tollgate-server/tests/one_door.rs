//! Every frontend decides through the limiter: the check API, the proxy, Envoy's rate limit
//! service and quota service never reach the store past its guards (the breaker, the
//! over-limit cache, the leases) and the observers. Read from the sources, so that a new call
//! fails here rather than in production.

use std::path::{Path, PathBuf};

/// The frontends' sources, from this crate's directory: the proxy's routes and its wiring
/// are in two crates.
const FRONTENDS: &[&str] = &[
    "../tollgate-http/src/api",
    "../tollgate-envoy/src/rls",
    "../tollgate-envoy/src/rlqs",
    "../tollgate-http/src/proxy.rs",
    "src/proxy.rs",
    "../tollgate-http/src/forward.rs",
    "../tollgate-tower/src",
];

fn sources(path: &Path, found: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).expect("a readable directory") {
            sources(&entry.expect("an entry").path(), found);
        }
    } else if path.extension().is_some_and(|extension| extension == "rs") {
        found.push(path.to_owned());
    }
}

#[test]
fn no_frontend_calls_the_store_directly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for frontend in FRONTENDS {
        let path = root.join(frontend);
        assert!(
            path.exists(),
            "{} is gone: update this list",
            path.display()
        );
        sources(&path, &mut files);
    }
    assert!(files.len() > 20, "the frontends' sources: {files:?}");
    let mut calls = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a readable source");
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if code.contains(".store()") || code.contains("store_now(") {
                calls.push(format!(
                    "{}:{}: {}",
                    file.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        calls.is_empty(),
        "frontends decide through the limiter (check, charge, refund, settle, look), not the store:\n{}",
        calls.join("\n")
    );
}
