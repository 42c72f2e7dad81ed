//! The client's address: the socket peer, or, when the peer is a trusted proxy, the rightmost
//! address of the configured forwarding header that is not itself a trusted proxy.
//!
//! Only trusted proxies are believed, and only through the one header the operator says they
//! write ([`ForwardedHeader`]): a client that sends its own `X-Forwarded-For` or `Forwarded`
//! gets no fresh quota, because its header is either ignored (it is not a proxy, or it is not
//! the configured header) or sits to the left of the address the trusted proxy appended, which
//! is the one used. The header is read from its right end, so however many forged entries a
//! client puts in front, only the hops the trusted proxies added are looked at. Addresses are
//! grouped by prefix (IPv6 by /64 by default), because one IPv6 client holds a whole /64.

use std::net::IpAddr;

use ipnet::IpNet;

use super::network_text::wide_network_text;

/// How many hops of a forwarding header are looked at, at most, counted from the right (the
/// nearest proxy): more trusted proxies in a row than this are taken as the client.
pub(crate) const MAX_HOPS: usize = 32;

/// Which forwarding header the trusted proxies write. Only that one is read: a client could
/// send the other, and no trusted proxy would have cleaned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx, HAProxy, cloud load balancers).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    Forwarded,
}

impl ForwardedHeader {
    /// Every name, as the policy file spells it.
    pub const NAMES: &'static str = "x-forwarded-for, forwarded";

    /// The header's name, lower case.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::XForwardedFor => "x-forwarded-for",
            Self::Forwarded => "forwarded",
        }
    }

    /// The header named `name` (case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::XForwardedFor, Self::Forwarded]
            .into_iter()
            .find(|header| header.as_str().eq_ignore_ascii_case(name))
    }
}

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

/// The `for=` address of one `Forwarded` element (`None` when it is missing, obfuscated or
/// unknown).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then(|| parse_node(value))
            .flatten()
    })
}

/// The hops of a forwarding header, nearest first, at most [`MAX_HOPS`] of them: the header
/// is read from its right end, so entries a client wrote in front are never reached before the
/// ones the proxies appended.
fn hops_from_nearest(
    value: &str,
    header: ForwardedHeader,
) -> impl Iterator<Item = Option<IpAddr>> + '_ {
    value
        .rsplit(',')
        .take(MAX_HOPS)
        .map(move |entry| match header {
            ForwardedHeader::XForwardedFor => parse_node(entry),
            ForwardedHeader::Forwarded => forwarded_for(entry),
        })
}

/// The client's address. `value` is the configured forwarding header's value (several header
/// lines joined with `,`).
///
/// Walking from the nearest hop, trusted proxies are skipped; the first address that is not
/// trusted is the client. A hop that cannot be read stops the walk at the last trusted proxy,
/// which is then taken as the client: a proxy that mangles the header gets one shared quota,
/// never a client-chosen one. So does a chain of more than 32 trusted proxies (`MAX_HOPS`).
pub fn client_ip(
    peer: IpAddr,
    value: Option<&str>,
    header: ForwardedHeader,
    trusted: &TrustedProxies,
) -> IpAddr {
    let peer = canonical(peer);
    if !trusted.contains(peer) {
        return peer;
    }
    let Some(value) = value else {
        return peer;
    };
    let mut client = peer;
    for hop in hops_from_nearest(value, header) {
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
    if let IpNet::V6(wide) = network
        && let Some(text) = wide_network_text(wide.addr(), wide.prefix_len())
    {
        return text;
    }
    if network.prefix_len() == network.max_prefix_len() {
        network.addr().to_string()
    } else {
        network.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const XFF: ForwardedHeader = ForwardedHeader::XForwardedFor;

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
        let client = client_ip(ip("198.51.100.9"), Some("1.2.3.4"), XFF, &trusted());
        assert_eq!(client, ip("198.51.100.9"));
    }

    #[test]
    fn the_rightmost_untrusted_address_wins() {
        // The client forged "1.2.3.4"; the first proxy appended the real 203.0.113.7.
        let header = "1.2.3.4, 203.0.113.7, 10.1.1.1";
        assert_eq!(
            client_ip(ip("10.2.2.2"), Some(header), XFF, &trusted()),
            ip("203.0.113.7")
        );
    }

    #[test]
    fn forged_entries_in_front_of_the_proxys_cannot_choose_the_client() {
        // More forged hops than are ever read, then the address the trusted proxy appended.
        for forged in [MAX_HOPS - 1, MAX_HOPS, MAX_HOPS + 1, 5 * MAX_HOPS] {
            let mut header: Vec<String> = (0..forged).map(|n| format!("198.51.100.{n}")).collect();
            header.push("203.0.113.7".to_owned());
            let client = client_ip(ip("10.2.2.2"), Some(&header.join(", ")), XFF, &trusted());
            assert_eq!(client, ip("203.0.113.7"), "{forged} forged hops");
        }
    }

    #[test]
    fn a_long_chain_of_trusted_proxies_is_one_shared_client() {
        // The client's own address sits past the hops that are read: the farthest trusted
        // proxy read stands for it, never an address of the client's choosing.
        let header = format!(
            "198.51.100.1, {}",
            vec!["10.9.9.9"; MAX_HOPS + 3].join(", ")
        );
        assert_eq!(
            client_ip(ip("10.2.2.2"), Some(&header), XFF, &trusted()),
            ip("10.9.9.9")
        );
    }

    #[test]
    fn forwarded_is_read_with_ports_brackets_and_quotes() {
        let header = r#"for=1.2.3.4, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.5"#;
        assert_eq!(
            client_ip(
                ip("10.0.0.1"),
                Some(header),
                ForwardedHeader::Forwarded,
                &trusted()
            ),
            ip("2001:db8:cafe::17")
        );
        assert_eq!(parse_node("192.0.2.43:47011"), Some(ip("192.0.2.43")));
        assert_eq!(parse_node("unknown"), None);
    }

    #[test]
    fn an_unreadable_hop_stops_at_the_last_trusted_proxy() {
        let header = "203.0.113.7, _hidden, 10.3.3.3";
        assert_eq!(
            client_ip(ip("10.2.2.2"), Some(header), XFF, &trusted()),
            ip("10.3.3.3")
        );
        assert_eq!(
            client_ip(ip("10.2.2.2"), Some("10.4.4.4"), XFF, &trusted()),
            ip("10.4.4.4")
        );
    }

    #[test]
    fn mapped_addresses_are_their_ipv4_selves() {
        let client = client_ip(ip("::ffff:10.0.0.1"), Some("203.0.113.7"), XFF, &trusted());
        assert_eq!(client, ip("203.0.113.7"));
    }

    #[test]
    fn a_bare_address_reads_as_the_standard_parser_reads_it() {
        for text in [
            "192.0.2.1",
            "2001:db8::1",
            "::ffff:192.0.2.1",
            "::",
            "1:2:3:4:5:6:7:8",
            "192.0.2",
            "192.0.2.1.5",
            "2001:db8::1::2",
            "2001:db8:zz::1",
            "",
        ] {
            assert_eq!(parse_node(text), text.parse().ok(), "{text:?}");
        }
        assert_eq!(parse_node(" \"192.0.2.1:443\" "), Some(ip("192.0.2.1")));
        assert_eq!(parse_node("[2001:db8::1]:443"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("192.0.2.1:http"), None);
        assert_eq!(parse_node("2001:db8::1:99999"), None);
    }

    #[test]
    fn header_names_are_read_case_insensitively() {
        assert_eq!(
            ForwardedHeader::from_name("X-Forwarded-For"),
            Some(ForwardedHeader::XForwardedFor)
        );
        assert_eq!(
            ForwardedHeader::from_name("forwarded"),
            Some(ForwardedHeader::Forwarded)
        );
        assert_eq!(ForwardedHeader::from_name("x-real-ip"), None);
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
    fn a_huge_header_is_read_from_its_end() {
        let huge = "1.2.3.4,".repeat(2_000) + "203.0.113.7";
        assert_eq!(
            client_ip(ip("10.0.0.1"), Some(&huge), XFF, &trusted()),
            ip("203.0.113.7")
        );
    }
}
