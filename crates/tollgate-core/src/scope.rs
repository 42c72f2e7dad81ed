//! Where a limit counts: in the node's own region, or across every region.

use std::fmt;
use std::str::FromStr;

/// Where a limit counts. A regional limit is decided by the node's store (memory, or the
/// Redis its region shares); a global limit is spent from units the node leases from a global
/// store that every region shares, so that all regions together never admit more than it.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Counted by the node's own store (the default).
    #[default]
    Region,
    /// Counted once across every region, through leases from the global store.
    Global,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scope::Region => "region",
            Scope::Global => "global",
        })
    }
}

/// A scope that is neither `region` nor `global`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scope {0:?}: expected region or global")]
pub struct ScopeError(String);

impl FromStr for Scope {
    type Err = ScopeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "region" => Ok(Scope::Region),
            "global" => Ok(Scope::Global),
            other => Err(ScopeError(other.chars().take(64).collect())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_read_and_print_alike() {
        for scope in [Scope::Region, Scope::Global] {
            assert_eq!(scope.to_string().parse::<Scope>(), Ok(scope));
        }
        let error = "planet".parse::<Scope>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown scope \"planet\": expected region or global"
        );
    }
}
