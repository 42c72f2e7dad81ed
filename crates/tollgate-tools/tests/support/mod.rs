//! The two binaries the tools' tests run: `tollgate-tools`, built for this crate's tests, and
//! the `tollgate` server, which another crate builds. Cargo gives a test only its own crate's
//! binaries (`CARGO_BIN_EXE_*`), so the test kit finds the server where Cargo puts every binary
//! of the workspace: beside `tollgate-tools`, in `target/<profile>/`. `cargo test --workspace`
//! (and so scripts/test) builds it first; a missing server fails the test, never skips it.

#![allow(dead_code, unreachable_pub, unused_imports)]

use std::path::PathBuf;
use std::process::{Command, ExitStatus};

pub use tollgate_testkit::tollgate::Tollgate;

/// The `tollgate-tools` binary under test.
pub fn tools() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tollgate-tools"))
}

/// Runs `tollgate-tools` to completion: (exit status, stdout, stderr).
pub fn run(args: &[&str]) -> (ExitStatus, String, String) {
    let output = tools()
        .args(args)
        .output()
        .expect("the tollgate-tools binary runs");
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The `tollgate` server binary of the same build, beside `tollgate-tools`.
pub fn server_binary() -> PathBuf {
    tollgate_testkit::tollgate::tollgate_binary()
}
