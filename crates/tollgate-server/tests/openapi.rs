//! The OpenAPI document checked against the real server by schemathesis, a schema-driven
//! fuzzer: schema-valid requests must be accepted and schema-invalid ones refused, and every
//! answer's status, content type and body must be what the document says.
//!
//! schemathesis is a Python program; `scripts/test` installs the pinned version into
//! `target/schemathesis` (a virtualenv). `TOLLGATE_SCHEMATHESIS` names another executable.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::Tollgate;

/// The version `scripts/test` pins.
const PINNED: &str = "4.32.5";

/// Test cases per operation and phase: enough to cover every constraint, bounded in time.
const MAX_EXAMPLES: &str = "100";

/// A fixed seed: the same cases on every run, so a failure reproduces.
const SEED: &str = "20261123";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn schemathesis() -> PathBuf {
    if let Some(path) = std::env::var_os("TOLLGATE_SCHEMATHESIS") {
        return PathBuf::from(path);
    }
    workspace().join("target/schemathesis/bin/schemathesis")
}

#[test]
fn the_openapi_document_matches_what_the_server_does() {
    let program = schemathesis();
    let version = Command::new(&program).arg("--version").output();
    let version = match version {
        Ok(output) if output.status.success() => {
            String::from_utf8_lossy(&output.stdout).into_owned()
        }
        _ => panic!(
            "schemathesis is missing: no working {}. Run scripts/test, which installs it, or: \
             python3 -m venv target/schemathesis && target/schemathesis/bin/pip install \
             schemathesis=={PINNED} (or set TOLLGATE_SCHEMATHESIS to its path)",
            program.display()
        ),
    };
    assert!(
        version.contains(PINNED),
        "{} is {version:?}, not the pinned {PINNED}: run scripts/test to install it",
        program.display()
    );

    let server = Tollgate::serve(&[]);
    let base = server.http_url();
    let reports = tempfile::tempdir().expect("a temporary directory");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis.toml");
    let output = Command::new(&program)
        .current_dir(reports.path())
        .env("NO_COLOR", "1")
        .arg("--config-file")
        .arg(&config)
        .args(["run", &format!("{base}/openapi.json"), "--url", &base])
        .args(["--seed", SEED, "--max-examples", MAX_EXAMPLES])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--workers", "1", "--continue-on-failure", "--no-color"])
        .args(["--generation-database", "none", "--request-timeout", "30"])
        // Hypothesis's health checks time the generation: on a loaded machine they fail a run
        // for being slow, which says nothing about the server.
        .args(["--suppress-health-check", "all"])
        .output()
        .expect("schemathesis runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "schemathesis found the server and /openapi.json disagreeing:\n{said}"
    );
    assert!(said.contains("passed"), "{said}");
    assert!(
        !said.contains("0 generated"),
        "schemathesis generated no case:\n{said}"
    );
}
