//! The client address from `Forwarded` and `X-Forwarded-For`: any header text gives an address
//! that is the peer or one the headers named, never a panic.

#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use tollgate::policy::{ForwardedHeader, TrustedProxies, client_ip};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (forwarded, x_forwarded_for) = text.split_once('\n').unwrap_or((&text, ""));
    let peer: IpAddr = "10.0.0.1".parse().expect("an address");
    let trusted = TrustedProxies::new(vec![
        "10.0.0.0/8".parse().expect("a network"),
        "2001:db8::/32".parse().expect("a network"),
    ]);
    for (value, header) in [
        (forwarded, ForwardedHeader::Forwarded),
        (x_forwarded_for, ForwardedHeader::XForwardedFor),
    ] {
        let found = client_ip(peer, Some(value), header, &trusted);
        if found == peer {
            continue;
        }
        let shown = found.to_string();
        let v4_mapped = format!("::ffff:{shown}");
        assert!(
            text.to_ascii_lowercase().contains(&shown)
                || text.to_ascii_lowercase().contains(&v4_mapped)
                || text.parse::<IpAddr>().is_err(),
            "{found} came from nowhere in {text:?}"
        );
    }
});
