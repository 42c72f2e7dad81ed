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

use crate::serve_args::ServeArgs;

/// The upstream variable that tells a deployment written for upstream, if one is set.
pub fn telling_variable(lookup: &dyn Fn(&str) -> Option<String>) -> Option<&'static str> {
    env::KNOWN
        .iter()
        .copied()
        .find(|name| env::telling(name) && lookup(name).is_some())
}

/// Applies the environment `lookup` gives, as upstream reads it, onto `args`.
pub fn apply(
    args: &mut ServeArgs,
    given: Given<'_>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Applied, Vec<String>> {
    let mut env = env::Env::new(lookup);
    apply::apply(args, given, &mut env)
}

#[cfg(test)]
mod tests;
