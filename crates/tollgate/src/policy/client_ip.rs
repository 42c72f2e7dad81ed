//! The client's address: the socket peer, or, when the peer is a trusted proxy, the rightmost
//! address in `Forwarded` / `X-Forwarded-For` that is not itself a trusted proxy.
//!
//! Only trusted proxies are believed, so a client that writes its own `X-Forwarded-For` gets
//! no fresh quota: its header is either ignored (it is not a proxy) or sits to the left of the
//! address the trusted proxy appended, which is the one used. Addresses are grouped by prefix
//! (IPv6 by /64 by default), because one IPv6 client holds a whole /64.

use std::net::IpAddr;

use ipnet::IpNet;

/// How many hops of a forwarding header are looked at, at most.
pub(crate) const MAX_HOPS: usize = 32;

/// The longest forwarding header value read, in bytes.
pub(crate) const MAX_HEADER_BYTES: usize = 8 * 1024;

/// Networks of proxies whose forwarding headers are believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<IpNet>,
}

impl TrustedProxies {
    /// Proxies in these networks.
    pub fn new(networks: Vec<IpNet>) -> Self {
        Self { networks }
    }

    /// Whether `address` is a trusted proxy.
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = canonical(address);
        self.networks
            .iter()
            .any(|network| network.contains(&address))
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.networks.is_empty()
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:192.0.2.1`) as the IPv4 address it is.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

/// One `for=` value of a `Forwarded` element, or one `X-Forwarded-For` entry, as an address:
/// `192.0.2.1`, `192.0.2.1:4711`, `[2001:db8::1]`, `"[2001:db8::1]:4711"`, `2001:db8::1`.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"');
    if let Some(rest) = text.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    if let Ok(address) = text.parse::<IpAddr>() {
        return Some(address);
    }
    let (host, port) = text.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// The `for=` addresses of a `Forwarded` header, nearest hop last (`None` for a hop whose
/// `for` is missing, obfuscated or unknown).
fn forwarded_hops(value: &str) -> Vec<Option<IpAddr>> {
    value
        .split(',')
        .take(MAX_HOPS)
        .map(|element| {
            element.split(';').find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                name.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| parse_node(value))
                    .flatten()
            })
        })
        .collect()
}

fn x_forwarded_for_hops(value: &str) -> Vec<Option<IpAddr>> {
    value.split(',').take(MAX_HOPS).map(parse_node).collect()
}

/// The client's address. `forwarded` and `x_forwarded_for` are the header values (several
/// header lines joined with `,`); `Forwarded` is preferred when both are present.
///
/// Walking from the nearest hop, trusted proxies are skipped; the first address that is not
/// trusted is the client. A hop that cannot be read stops the walk at the last trusted proxy,
/// which is then taken as the client: a proxy that mangles the header gets one shared quota,
/// never a client-chosen one.
pub fn client_ip(
    peer: IpAddr,
    forwarded: Option<&str>,
    x_forwarded_for: Option<&str>,
    trusted: &TrustedProxies,
) -> IpAddr {
    let peer = canonical(peer);
    if !trusted.contains(peer) {
        return peer;
    }
    let hops = match (forwarded, x_forwarded_for) {
        (Some(value), _) if value.len() <= MAX_HEADER_BYTES => forwarded_hops(value),
        (_, Some(value)) if value.len() <= MAX_HEADER_BYTES => x_forwarded_for_hops(value),
        _ => return peer,
    };
    let mut client = peer;
    for hop in hops.iter().rev() {
        match hop.map(canonical) {
            Some(address) if trusted.contains(address) => client = address,
            Some(address) => return address,
            None => return client,
        }
    }
    client
}

/// The network an address is counted in: itself for IPv4 with a /32 prefix, its /64 for IPv6
/// by default.
pub fn group(address: IpAddr, ipv4_prefix: u8, ipv6_prefix: u8) -> IpNet {
    let prefix = match address {
        IpAddr::V4(_) => ipv4_prefix.min(32),
        IpAddr::V6(_) => ipv6_prefix.min(128),
    };
    IpNet::new(address, prefix).map_or_else(|_| IpNet::from(address), |network| network.trunc())
}

/// The key text of an address's group: `203.0.113.7` or `2001:db8:1:2::/64`.
pub fn group_key(address: IpAddr, ipv4_prefix: u8, ipv6_prefix: u8) -> String {
    let network = group(canonical(address), ipv4_prefix, ipv6_prefix);
    if network.prefix_len() == network.max_prefix_len() {
        network.addr().to_string()
    } else {
        network.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn trusted() -> TrustedProxies {
        TrustedProxies::new(vec![
            "10.0.0.0/8".parse().unwrap(),
            "2001:db8:ffff::/48".parse().unwrap(),
        ])
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let client = client_ip(ip("198.51.100.9"), None, Some("1.2.3.4"), &trusted());
        assert_eq!(client, ip("198.51.100.9"));
    }

    #[test]
    fn the_rightmost_untrusted_address_wins() {
        // The client forged "1.2.3.4"; the first proxy appended the real 203.0.113.7.
        let header = "1.2.3.4, 203.0.113.7, 10.1.1.1";
        assert_eq!(
            client_ip(ip("10.2.2.2"), None, Some(header), &trusted()),
            ip("203.0.113.7")
        );
    }

    #[test]
    fn forwarded_is_read_with_ports_brackets_and_quotes() {
        let header = r#"for=1.2.3.4, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.5"#;
        assert_eq!(
            client_ip(ip("10.0.0.1"), Some(header), Some("9.9.9.9"), &trusted()),
            ip("2001:db8:cafe::17")
        );
        assert_eq!(parse_node("192.0.2.43:47011"), Some(ip("192.0.2.43")));
        assert_eq!(parse_node("unknown"), None);
    }

    #[test]
    fn an_unreadable_hop_stops_at_the_last_trusted_proxy() {
        let header = "203.0.113.7, _hidden, 10.3.3.3";
        assert_eq!(
            client_ip(ip("10.2.2.2"), None, Some(header), &trusted()),
            ip("10.3.3.3")
        );
        assert_eq!(
            client_ip(ip("10.2.2.2"), None, Some("10.4.4.4"), &trusted()),
            ip("10.4.4.4")
        );
    }

    #[test]
    fn mapped_addresses_are_their_ipv4_selves() {
        let client = client_ip(ip("::ffff:10.0.0.1"), None, Some("203.0.113.7"), &trusted());
        assert_eq!(client, ip("203.0.113.7"));
    }

    #[test]
    fn ipv6_clients_are_grouped_by_prefix() {
        let a = group_key(ip("2001:db8:1:2:aaaa::1"), 32, 64);
        let b = group_key(ip("2001:db8:1:2:bbbb::2"), 32, 64);
        assert_eq!(a, "2001:db8:1:2::/64");
        assert_eq!(a, b);
        assert_ne!(a, group_key(ip("2001:db8:1:3::1"), 32, 64));
        assert_eq!(group_key(ip("203.0.113.7"), 32, 64), "203.0.113.7");
        assert_eq!(group_key(ip("203.0.113.7"), 24, 64), "203.0.113.0/24");
    }

    #[test]
    fn oversized_headers_are_not_read() {
        let huge = "1.2.3.4,".repeat(2_000);
        assert_eq!(
            client_ip(ip("10.0.0.1"), None, Some(&huge), &trusted()),
            ip("10.0.0.1")
        );
    }
}
