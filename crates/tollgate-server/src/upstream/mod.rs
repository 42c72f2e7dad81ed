//! envoyproxy/ratelimit's environment: a Deployment written for its image runs `tollgate serve`
//! unchanged. Started as `ratelimit` (the image's `/bin/ratelimit`, which Envoy Gateway runs)
//! or with one of upstream's own variables set, the server reads every variable upstream reads,
//! with upstream's meaning and defaults (its ports on all interfaces, its runtime directory, its
//! Redis); what Tollgate does not do is refused at start with what to do instead, never
//! ignored. Tollgate's own flags and `TOLLGATE_*` variables win.

mod apply;
mod counters;
mod env;
mod redis;
mod values;
mod xds;

pub use apply::{Applied, Given};

/// `--upstream-env`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum UpstreamMode {
    /// Read upstream's variables when one of those particular to it is set.
    #[default]
    Auto,
    /// Read them, set or not (upstream's defaults for the unset).
    On,
    /// Never read them.
    Off,
}

/// Whether `tollgate serve` reads envoyproxy/ratelimit's environment.
#[derive(Debug, Clone, clap::Args)]
pub struct UpstreamFlags {
    /// Read envoyproxy/ratelimit's environment variables (REDIS_URL, RUNTIME_ROOT, ...):
    /// `auto` when one particular to it is set, `on`, or `off`.
    #[arg(
        long,
        env = "TOLLGATE_UPSTREAM_ENV",
        value_enum,
        default_value = "auto"
    )]
    pub upstream_env: UpstreamMode,
}

/// The upstream variable that tells a deployment written for upstream, if one is set.
pub fn telling_variable(lookup: &dyn Fn(&str) -> Option<String>) -> Option<&'static str> {
    env::KNOWN
        .iter()
        .copied()
        .find(|name| env::telling(name) && lookup(name).is_some())
}

/// Applies the environment `lookup` gives, as upstream reads it, onto `args`.
pub fn apply(
    args: &mut crate::serve::ServeArgs,
    given: Given<'_>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Applied, Vec<String>> {
    let mut env = env::Env::new(lookup);
    apply::apply(args, given, &mut env)
}

#[cfg(test)]
mod tests;
