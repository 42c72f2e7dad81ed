//! Allow and deny lists: client networks and exact identity keys.

use std::collections::HashSet;
use std::net::IpAddr;

use ipnet::IpNet;

use super::model::ListEntry;

/// A compiled allow or deny list.
#[derive(Debug, Clone, Default)]
pub(crate) struct AccessList {
    networks: Vec<IpNet>,
    keys: HashSet<String>,
}

impl AccessList {
    pub(crate) fn new(entries: &[ListEntry]) -> Self {
        let mut list = Self::default();
        for entry in entries {
            match entry {
                ListEntry::Network(network) => list.networks.push(*network),
                ListEntry::Key(key) => {
                    list.keys.insert(key.clone());
                }
            }
        }
        list
    }

    /// Whether the client address or one of the identity parts is listed.
    pub(crate) fn contains(
        &self,
        client: Option<IpAddr>,
        identity: &[(&str, Option<&str>)],
    ) -> bool {
        if let Some(address) = client
            && self
                .networks
                .iter()
                .any(|network| network.contains(&address))
        {
            return true;
        }
        !self.keys.is_empty()
            && identity.iter().any(|(part, value)| {
                value.is_some_and(|value| self.keys.contains(&format!("{part}:{value}")))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_match_networks_and_identity_keys() {
        let list = AccessList::new(&[
            ListEntry::Network("10.0.0.0/8".parse().unwrap()),
            ListEntry::Key("user:admin".to_owned()),
        ]);
        assert!(list.contains(Some("10.9.9.9".parse().unwrap()), &[]));
        assert!(!list.contains(Some("11.0.0.1".parse().unwrap()), &[("user", Some("bob"))]));
        assert!(list.contains(None, &[("user", Some("admin"))]));
        assert!(!list.contains(None, &[("tenant", Some("admin"))]));
    }
}
