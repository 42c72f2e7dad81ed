//! Which `tollgate` binary the regions run. The demonstration used to start copies of itself;
//! now that it lives outside the server, it finds the server the way a person would: the path
//! given, else the `tollgate` built next to `tollgate-tools` (both land in `target/<profile>/`),
//! else one on `PATH`.

use std::path::{Path, PathBuf};

/// The server binary's file name.
const NAME: &str = "tollgate";

/// The `tollgate` binary to run: `given`, or found as described above.
pub(super) fn locate(given: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(given) = given {
        return if given.is_file() {
            Ok(given.to_path_buf())
        } else {
            Err(format!("--server: {} is not a file", given.display()))
        };
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(NAME)));
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(NAME))
            .find(|candidate| candidate.is_file())
    });
    beside
        .filter(|path| path.is_file())
        .or(on_path)
        .ok_or_else(|| {
            "cannot find the tollgate binary beside tollgate-tools or on PATH: build it \
             (cargo build --release -p tollgate-server) or give --server PATH"
                .to_owned()
        })
}
