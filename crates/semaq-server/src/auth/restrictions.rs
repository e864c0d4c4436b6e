//! A user JWT's connection restrictions: the source networks it may connect from (`src`) and
//! the daily time ranges it may connect in (`times`, in the `times_location` zone), checked as
//! nats-server's `validateSrc` and `validateTimes` check them.

use std::net::IpAddr;
use std::time::Duration;

use jiff::civil::{DateTime, Time};
use jiff::tz::TimeZone;
use serde::{Deserialize, Deserializer};

/// A daily time range, `HH:MM:SS` at both ends; an end before the start crosses midnight.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct TimeRange {
    /// When connecting becomes allowed.
    pub start: String,
    /// When it stops being allowed.
    pub end: String,
}

/// Reads `src` as the jwt library does: a list of CIDRs, or one string of comma-separated ones
/// (trimmed, lowercased, empty parts dropped).
pub fn cidr_list<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        List(Vec<String>),
        Text(String),
        Null(()),
    }
    Ok(match Either::deserialize(deserializer)? {
        Either::List(list) => list,
        Either::Text(text) => {
            let mut parts: Vec<String> = Vec::new();
            for part in text.to_lowercase().split(',').map(str::trim).filter(|part| !part.is_empty()) {
                if !parts.iter().any(|known| known == part) {
                    parts.push(part.to_string());
                }
            }
            parts
        }
        Either::Null(()) => Vec::new(),
    })
}

/// Whether a client at `peer` may connect under `src`: any address when it is empty, else one
/// inside one of its CIDRs. A CIDR that does not parse refuses, as in nats-server.
pub fn source_allowed(src: &[String], peer: Option<IpAddr>) -> bool {
    if src.is_empty() {
        return true;
    }
    let Some(peer) = peer.map(|ip| ip.to_canonical()) else { return false };
    for cidr in src {
        match parse_cidr(cidr) {
            Some((network, bits)) if contains(network, bits, peer) => return true,
            Some(_) => {}
            None => return false,
        }
    }
    false
}

fn parse_cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (address, bits) = text.split_once('/')?;
    let network: IpAddr = address.parse().ok()?;
    let bits: u8 = bits.parse().ok().filter(|_| bits.bytes().all(|b| b.is_ascii_digit()))?;
    let most = if network.is_ipv4() { 32 } else { 128 };
    (bits <= most).then_some((network, bits))
}

fn contains(network: IpAddr, bits: u8, peer: IpAddr) -> bool {
    let prefix = |value: u128, width: u8| if bits == 0 { 0 } else { value >> (width - bits) };
    match (network, peer) {
        (IpAddr::V4(network), IpAddr::V4(peer)) => {
            prefix(u128::from(u32::from(network)), 32) == prefix(u128::from(u32::from(peer)), 32)
        }
        (IpAddr::V6(network), IpAddr::V6(peer)) => prefix(u128::from(network), 128) == prefix(u128::from(peer), 128),
        _ => false,
    }
}

/// When a connection may be made under `times` in `locale`'s zone (the server's own when empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// No time restriction.
    Always,
    /// Inside a range that ends after this long; the connection is closed then.
    For(Duration),
}

/// The connect window at `now`, or `None` outside every range (or for a range or zone that does
/// not parse, which nats-server refuses the same way).
pub fn connect_window(times: &[TimeRange], locale: &str, now: jiff::Timestamp) -> Option<Window> {
    if times.is_empty() {
        return Some(Window::Always);
    }
    let zone = if locale.is_empty() { TimeZone::system() } else { load_zone(locale)? };
    let now = zone.to_datetime(now);
    let mut longest: Option<Duration> = None;
    for range in times {
        let start = now.date().to_datetime(clock_time(&range.start)?);
        let end = now.date().to_datetime(clock_time(&range.end)?);
        if let Some(left) = time_left(start, end, now) {
            longest = Some(longest.map_or(left, |known| known.max(left)));
        }
    }
    longest.map(Window::For)
}

/// A zone as Go's `time.LoadLocation` finds it: `UTC`, `Local` (the server's), or an IANA name
/// spelled as the (bundled) database spells it.
fn load_zone(name: &str) -> Option<TimeZone> {
    match name {
        "UTC" => Some(TimeZone::UTC),
        "Local" => Some(TimeZone::system()),
        _ => TimeZone::get(name).ok().filter(|zone| zone.iana_name() == Some(name)),
    }
}

/// Go's `15:04:05`: a one- or two-digit hour, two-digit minutes and seconds.
fn clock_time(text: &str) -> Option<Time> {
    let mut parts = text.split(':');
    let (hour, minute, second) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |part: &str, widths: &[usize]| {
        (widths.contains(&part.len()) && part.bytes().all(|b| b.is_ascii_digit())).then(|| part.parse::<i8>().ok())?
    };
    if parts.next().is_some() {
        return None;
    }
    Time::new(digits(hour, &[1, 2])?, digits(minute, &[2])?, digits(second, &[2])?, 0).ok()
}

/// How long `now` stays inside `start`..`end` (both today), strictly inside as in nats-server's
/// `validateTimeRangeAt`; a range whose end is before its start runs past midnight.
fn time_left(start: DateTime, end: DateTime, now: DateTime) -> Option<Duration> {
    let left = |end: DateTime| Duration::try_from(now.duration_until(end)).ok();
    if start < now && now < end {
        return left(end);
    }
    if start > end {
        if now < end {
            return left(end);
        }
        let tomorrow = end.checked_add(jiff::Span::new().days(1)).ok()?;
        if start < now && now < tomorrow {
            return left(tomorrow);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: &str, end: &str) -> TimeRange {
        TimeRange { start: start.into(), end: end.into() }
    }

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn src_admits_addresses_inside_a_cidr_only() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(source_allowed(&[], Some(loopback)));
        assert!(source_allowed(&["10.0.0.0/8".into(), "127.0.0.0/8".into()], Some(loopback)));
        assert!(!source_allowed(&["10.0.0.0/8".into()], Some(loopback)));
        assert!(source_allowed(&["0.0.0.0/0".into()], Some(loopback)));
        assert!(source_allowed(&["127.0.0.1/32".into()], Some("::ffff:127.0.0.1".parse().unwrap())));
        assert!(!source_allowed(&["127.0.0.1".into()], Some(loopback)), "a bare address is no CIDR");
        assert!(!source_allowed(&["10.0.0.0/8".into()], None));
        assert!(source_allowed(&["::1/128".into()], Some("::1".parse().unwrap())));
    }

    #[test]
    fn src_reads_a_comma_separated_string_or_a_list() {
        #[derive(Deserialize)]
        struct Claims {
            #[serde(deserialize_with = "cidr_list")]
            src: Vec<String>,
        }
        let text: Claims = serde_json::from_str(r#"{"src": " 10.0.0.0/8 ,127.0.0.0/8,,"}"#).unwrap();
        assert_eq!(text.src, ["10.0.0.0/8", "127.0.0.0/8"]);
        let list: Claims = serde_json::from_str(r#"{"src": ["192.168.0.0/16"]}"#).unwrap();
        assert_eq!(list.src, ["192.168.0.0/16"]);
    }

    #[test]
    fn times_admit_only_inside_a_range_and_say_how_long() {
        let now = at("2026-12-03T10:00:00Z");
        let inside = connect_window(&[range("09:00:00", "11:00:00")], "UTC", now);
        assert_eq!(inside, Some(Window::For(Duration::from_secs(3600))));
        assert_eq!(connect_window(&[range("11:00:00", "12:00:00")], "UTC", now), None);
        assert_eq!(connect_window(&[], "", now), Some(Window::Always));
        let longest = connect_window(&[range("9:30:00", "10:30:00"), range("08:00:00", "12:00:00")], "UTC", now);
        assert_eq!(longest, Some(Window::For(Duration::from_secs(7200))), "the range that lasts longest");
    }

    #[test]
    fn times_across_midnight_and_in_a_zone() {
        let night = [range("22:00:00", "06:00:00")];
        assert_eq!(
            connect_window(&night, "UTC", at("2026-12-03T05:00:00Z")),
            Some(Window::For(Duration::from_secs(3600)))
        );
        assert_eq!(
            connect_window(&night, "UTC", at("2026-12-03T23:00:00Z")),
            Some(Window::For(Duration::from_secs(7 * 3600)))
        );
        assert_eq!(connect_window(&night, "UTC", at("2026-12-03T12:00:00Z")), None);
        let in_tokyo = connect_window(&[range("18:00:00", "20:00:00")], "Asia/Tokyo", at("2026-12-03T10:00:00Z"));
        assert_eq!(in_tokyo, Some(Window::For(Duration::from_secs(3600))), "10:00 UTC is 19:00 in Tokyo");
    }

    #[test]
    fn times_that_do_not_parse_refuse() {
        let now = at("2026-12-03T10:00:00Z");
        assert_eq!(connect_window(&[range("9am", "11:00:00")], "UTC", now), None);
        assert_eq!(connect_window(&[range("09:00", "11:00:00")], "UTC", now), None);
        assert_eq!(connect_window(&[range("09:00:00", "11:00:00")], "Mars/Olympus", now), None);
    }
}
