//! The text of an IPv6 network of 64 bits or fewer, as `Display` writes it, without the
//! formatting machinery: every request keyed by a client's /64 writes one, and keys written by
//! any version must be the same text (they live in Redis across upgrades).
//!
//! Such an address ends in four zero groups, so the longest run of zero groups (the one
//! `Display` shortens to `::`, per RFC 5952) is always the trailing run: any other run lies
//! within the first four groups without touching it, three groups at most. And it is never
//! written as an IPv4-mapped address, whose sixth group is `ffff`.

use std::net::Ipv6Addr;

/// `network/prefix` for an IPv6 network of at most 64 bits whose host bits are zero; `None`
/// for any other, which `Display` writes.
pub(super) fn wide_network_text(address: Ipv6Addr, prefix: u8) -> Option<String> {
    let groups = address.segments();
    if prefix > 64 || groups[4..].iter().any(|&group| group != 0) {
        return None;
    }
    // The groups before the trailing run of zeros.
    let written = groups[..4]
        .iter()
        .rposition(|&group| group != 0)
        .map_or(0, |last| last + 1);
    let mut text = String::with_capacity(24);
    for (index, &group) in groups[..written].iter().enumerate() {
        if index > 0 {
            text.push(':');
        }
        push_hex(&mut text, group);
    }
    text.push_str("::/");
    if prefix >= 10 {
        text.push(char::from(b'0' + prefix / 10));
    }
    text.push(char::from(b'0' + prefix % 10));
    Some(text)
}

/// A group in lower-case hex without leading zeros.
fn push_hex(text: &mut String, group: u16) {
    let digits = (16 - group.leading_zeros()).div_ceil(4).max(1);
    for shift in (0..digits).rev() {
        let nibble = (group >> (shift * 4)) & 0xf;
        text.push(char::from(b"0123456789abcdef"[usize::from(nibble)]));
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn writes_what_display_writes(
            groups in proptest::array::uniform4(prop_oneof![Just(0u16), Just(1u16), Just(0xffff_u16), any::<u16>()]),
            prefix in 0u8..=64,
        ) {
            let address = Ipv6Addr::new(groups[0], groups[1], groups[2], groups[3], 0, 0, 0, 0);
            prop_assert_eq!(
                wide_network_text(address, prefix),
                Some(format!("{address}/{prefix}"))
            );
        }
    }

    #[test]
    fn leaves_narrow_networks_and_host_bits_to_display() {
        let address: Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert_eq!(wide_network_text(address, 64), None);
        let network: Ipv6Addr = "2001:db8::".parse().unwrap();
        assert_eq!(wide_network_text(network, 96), None);
        assert_eq!(
            wide_network_text(Ipv6Addr::UNSPECIFIED, 0).as_deref(),
            Some("::/0")
        );
        assert_eq!(
            wide_network_text(network, 64).as_deref(),
            Some("2001:db8::/64")
        );
    }
}
