//! Loading the policy file, or the built-in example when none is given.

use std::path::Path;

use tollgate::Policies;

/// The configuration `tollgate serve` runs with no `--config`: `policies.yaml` in this crate
/// (`examples/policies.yaml` links to it), so that the published package holds it.
pub const BUILT_IN: &str = include_str!("../policies.yaml");

/// Reads and compiles `path`, or the built-in example; errors list every problem.
pub fn load(path: Option<&Path>) -> Result<Policies, String> {
    match path {
        None => Policies::from_yaml("built-in example (examples/policies.yaml)", BUILT_IN)
            .map_err(|e| e.to_string()),
        Some(path) => {
            let source = path.display().to_string();
            let metadata = std::fs::metadata(path)
                .map_err(|error| format!("{source}: cannot read: {error}"))?;
            if metadata.len() > tollgate::yaml::MAX_CONFIG_BYTES as u64 {
                return Err(format!(
                    "{source}: larger than {} bytes",
                    tollgate::yaml::MAX_CONFIG_BYTES
                ));
            }
            let text = std::fs::read_to_string(path)
                .map_err(|error| format!("{source}: cannot read: {error}"))?;
            Policies::from_yaml(&source, &text).map_err(|e| e.to_string())
        }
    }
}

/// What is wrong with a file that holds no policy without saying so, if `policies` came from
/// one: every request would pass.
pub fn empty_by_omission(source: &Path, policies: &Policies) -> Option<String> {
    policies.empty_by_omission().then(|| {
        format!(
            "{}: holds no policies and does not say so (an empty or cut-short file?): every request would pass unlimited; write `policies: []` to mean it",
            source.display()
        )
    })
}
