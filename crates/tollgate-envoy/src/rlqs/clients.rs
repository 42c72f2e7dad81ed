//! The quota service's clients and their part of its caps. A client is a peer (an Envoy, by
//! its address; every stream on its own where the transport has no address), which may hold
//! several streams. Each client is held to its own caps, and the service-wide caps are shared
//! fairly: when one is full, a client holding less than an even part still gets its place,
//! taken from the client holding the most, so that no client can fill a cap and lock others
//! out.

use std::collections::HashMap;
use std::net::IpAddr;

use super::state::State;

/// Who holds a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ClientId {
    /// A peer, by its address.
    Peer(IpAddr),
    /// A stream whose transport names no peer: a client of its own.
    Stream(u64),
}

/// What one client holds.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Held {
    pub(super) streams: usize,
    pub(super) subscriptions: usize,
    /// Its oldest stream.
    pub(super) oldest: u64,
}

impl State {
    /// What each client holds.
    pub(super) fn held(&self) -> HashMap<ClientId, Held> {
        let mut held: HashMap<ClientId, Held> = HashMap::new();
        for (id, stream) in &self.streams {
            let entry = held.entry(stream.client).or_insert(Held {
                oldest: *id,
                ..Held::default()
            });
            entry.streams += 1;
            entry.subscriptions += stream.buckets.len();
            entry.oldest = entry.oldest.min(*id);
        }
        held
    }

    /// What `client` holds.
    pub(super) fn held_by(&self, client: ClientId) -> Held {
        self.held().get(&client).copied().unwrap_or_default()
    }

    /// The client holding the most of what `measure` counts, other than `client`, if it holds
    /// more than `client` would after taking one more.
    pub(super) fn heaviest_but(
        &self,
        client: ClientId,
        measure: impl Fn(&Held) -> usize,
    ) -> Option<(ClientId, Held)> {
        let held = self.held();
        let own = held.get(&client).map_or(0, &measure);
        held.into_iter()
            .filter(|(other, _)| *other != client)
            .max_by_key(|(_, held)| measure(held))
            .filter(|(_, held)| measure(held) > own + 1)
    }
}

/// An even part of a cap of `cap` among `clients` clients (at least one place).
pub(super) fn even_part(cap: usize, clients: usize) -> usize {
    (cap / clients.max(1)).max(1)
}
