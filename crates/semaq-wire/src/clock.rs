//! The one wall clock: unix nanoseconds now, the civil (proleptic Gregorian, UTC) calendar, and
//! the text forms of time the server, the store and the CLI share: RFC 3339 (JetStream API,
//! monitoring, L4 event times), nats-server's log stamp and Go-style durations.
//!
//! Dependency-free because only UTC is needed, and because the L4 chain hashes the nanoseconds
//! [`parse_rfc3339`] reads: the server and `semaq verify` must read the text identically.

use std::time::{Duration, SystemTime};

const NANOS_PER_SECOND: i64 = 1_000_000_000;
const SECONDS_PER_DAY: i64 = 86_400;
/// Fraction digits RFC 3339 text may carry (nanosecond resolution).
const FRACTION_DIGITS_MAX: usize = 9;

/// Now, in unix nanoseconds.
pub fn unix_nanos_now() -> i64 {
    unix_nanos(SystemTime::now())
}

/// `time` in unix nanoseconds: 0 before 1970, `i64::MAX` after 2262.
pub fn unix_nanos(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |since| i64::try_from(since.as_nanos()).unwrap_or(i64::MAX))
}

/// The instant `unix_ns` names; times before 1970 are taken as 1970.
pub fn system_time(unix_ns: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::try_from(unix_ns).unwrap_or(0))
}

/// Calendar fields of a UTC instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// Year.
    pub year: i64,
    /// Month 1–12.
    pub month: u32,
    /// Day 1–31.
    pub day: u32,
    /// Hour 0–23.
    pub hour: u32,
    /// Minute 0–59.
    pub minute: u32,
    /// Second 0–59.
    pub second: u32,
    /// Microseconds within the second.
    pub micros: u32,
}

/// Splits a time into UTC calendar fields (times before 1970 are taken as 1970).
pub fn civil(time: SystemTime) -> Civil {
    let since_epoch = time.duration_since(SystemTime::UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = i64::try_from(since_epoch.as_secs()).unwrap_or(i64::MAX);
    // Each fits: a second of the day, a month, a day of the month.
    let small = |n: i64| u32::try_from(n).unwrap_or_default();
    let of_day = small(secs.rem_euclid(SECONDS_PER_DAY));
    let (year, month, day) = civil_from_days(secs.div_euclid(SECONDS_PER_DAY));
    Civil {
        year,
        month: small(month),
        day: small(day),
        hour: of_day / 3600,
        minute: of_day / 60 % 60,
        second: of_day % 60,
        micros: since_epoch.subsec_micros(),
    }
}

/// `2026-11-29T08:56:48.123456Z`: the JetStream API's and monitoring's form.
pub fn rfc3339(time: SystemTime) -> String {
    let c = civil(time);
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", c.year, c.month, c.day, c.hour, c.minute, c.second, c.micros)
}

/// RFC 3339 in UTC with nanoseconds, e.g. `2026-05-01T12:00:00.500000000Z`; any `i64`, before
/// 1970 included (event times in error messages).
pub fn rfc3339_nanos(unix_ns: i64) -> String {
    let seconds = unix_ns.div_euclid(NANOS_PER_SECOND);
    let nanos = unix_ns.rem_euclid(NANOS_PER_SECOND);
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z", of_day / 3600, of_day / 60 % 60, of_day % 60)
}

/// Unix nanoseconds from RFC 3339 text: `2026-05-01T12:00:00Z`, with an optional fraction of up
/// to nine digits and `Z` or a `±hh:mm` offset (`T` may be `t` or a space, `Z` may be `z`).
/// `None` for anything else, for impossible dates and times, and outside the `i64` nanosecond
/// range (years 1678 to 2262).
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let text = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.iter().all(u8::is_ascii_digit).then(|| part.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if separators.iter().any(|&(at, c)| text.get(at) != Some(&c)) || !matches!(text.get(10), Some(b'T' | b't' | b' ')) {
        return None;
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    let valid = (1..=12).contains(&month)
        && day >= 1
        && day <= days_in_month(year, month)
        && hour < 24
        && minute < 60
        && second < 60;
    if !valid {
        return None;
    }
    let mut rest = text.get(19..)?;
    let mut fraction_ns = 0i64;
    if let Some(after_dot) = rest.strip_prefix(b".") {
        let count = after_dot.iter().take_while(|b| b.is_ascii_digit()).count();
        if count == 0 || count > FRACTION_DIGITS_MAX {
            return None;
        }
        let value = after_dot[..count].iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
        fraction_ns = value * 10i64.pow(u32::try_from(FRACTION_DIGITS_MAX - count).ok()?);
        rest = &after_dot[count..];
    }
    let offset_seconds = match rest {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let two = |a: u8, b: u8| {
                (a.is_ascii_digit() && b.is_ascii_digit()).then(|| i64::from((a - b'0') * 10 + (b - b'0')))
            };
            let (hours, minutes) = (two(*h1, *h2)?, two(*m1, *m2)?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let magnitude = hours * 3600 + minutes * 60;
            if *sign == b'-' {
                -magnitude
            } else {
                magnitude
            }
        }
        _ => return None,
    };
    let seconds =
        days_from_civil(year, month, day) * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second - offset_seconds;
    seconds.checked_mul(NANOS_PER_SECOND)?.checked_add(fraction_ns)
}

/// nats-server's log stamp: `2026/11/29 08:56:48.123456`.
pub fn log_stamp(time: SystemTime) -> String {
    let c = civil(time);
    format!("{:04}/{:02}/{:02} {:02}:{:02}:{:02}.{:06}", c.year, c.month, c.day, c.hour, c.minute, c.second, c.micros)
}

/// Go-style duration text as nats-server prints uptime: `1d2h3m4s`.
pub fn go_duration(duration: Duration) -> String {
    let mut secs = duration.as_secs();
    let days = secs / 86_400;
    secs %= 86_400;
    let (hours, minutes, seconds) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if days > 0 {
        out.push_str(&format!("{days}d"));
    }
    if days > 0 || hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if days > 0 || hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&format!("{seconds}s"));
    out
}

/// Go's `time.Duration.String` of `ns` nanoseconds: `0s`, `1.5µs`, `100ms`, `1m30s`, `-1ns`.
pub fn go_duration_text(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let u = ns.unsigned_abs();
    let body = match u {
        0 => "0s".to_string(),
        1..1_000 => format!("{u}ns"),
        1_000..1_000_000 => format!("{}µs", fraction(u, 3)),
        1_000_000..1_000_000_000 => format!("{}ms", fraction(u, 6)),
        _ => {
            let (seconds, minutes) = (u / 1_000_000_000, u / 60_000_000_000);
            let seconds = format!("{}s", fraction(seconds % 60 * 1_000_000_000 + u % 1_000_000_000, 9));
            match (minutes / 60, minutes % 60) {
                (0, 0) => seconds,
                (0, minutes) => format!("{minutes}m{seconds}"),
                (hours, minutes) => format!("{hours}h{minutes}m{seconds}"),
            }
        }
    };
    format!("{sign}{body}")
}

/// `value` with its last `digits` digits as a decimal fraction, trailing zeros dropped.
fn fraction(value: u64, digits: u32) -> String {
    let scale = 10u64.pow(digits);
    let (whole, part) = (value / scale, value % scale);
    if part == 0 {
        return whole.to_string();
    }
    let part = format!("{part:0width$}", width = digits as usize);
    format!("{whole}.{}", part.trim_end_matches('0'))
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's days-from-civil).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let day_of_year = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// (year, month, day) of a day count since 1970-01-01 (Hinnant's civil-from-days).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        let time = SystemTime::UNIX_EPOCH + Duration::from_micros(1_795_683_408_123_456);
        assert_eq!(rfc3339(time), "2026-11-26T08:56:48.123456Z");
        assert_eq!(log_stamp(SystemTime::UNIX_EPOCH), "1970/01/01 00:00:00.000000");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn uptime_reads_like_go() {
        assert_eq!(go_duration(Duration::from_secs(5)), "5s");
        assert_eq!(go_duration(Duration::from_secs(3_725)), "1h2m5s");
        assert_eq!(go_duration(Duration::from_secs(90_061)), "1d1h1m1s");
    }

    #[test]
    fn go_duration_text_is_gos_duration_string() {
        const NS_PER_S: i64 = 1_000_000_000;
        let go = [(0, "0s"), (-1, "-1ns"), (1_500, "1.5µs"), (100_000_000, "100ms"), (1_500_000_000, "1.5s")];
        let go = go.into_iter().chain([(90 * NS_PER_S, "1m30s"), (3_600 * NS_PER_S + 1, "1h0m0.000000001s")]);
        for (ns, words) in go {
            assert_eq!(go_duration_text(ns), words);
        }
    }

    #[test]
    fn unix_nanos_and_instants_convert_both_ways() {
        let time = system_time(1_714_564_800_123_456_789);
        assert_eq!(unix_nanos(time), 1_714_564_800_123_456_789);
        assert_eq!(system_time(-5), SystemTime::UNIX_EPOCH);
        assert_eq!(unix_nanos(SystemTime::UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert!(unix_nanos_now() > 1_700_000_000 * NANOS_PER_SECOND);
    }

    #[test]
    fn rfc3339_nanos_round_trips_through_the_parser() {
        for ns in [0, 1, 1_714_564_800_123_456_789, -1, -86_400_000_000_001, 951_782_400_000_000_000] {
            let text = rfc3339_nanos(ns);
            assert_eq!(parse_rfc3339(&text), Some(ns), "{text}");
        }
        assert_eq!(rfc3339_nanos(1_714_564_800_500_000_000), "2024-05-01T12:00:00.500000000Z");
        assert_eq!(parse_rfc3339("2024-05-01t14:00:00.000000001+02:00"), Some(1_714_564_800 * NANOS_PER_SECOND + 1));
        assert_eq!(parse_rfc3339("0001-01-01T00:00:00Z"), None, "outside the nanosecond range");
        assert_eq!(parse_rfc3339("2024-05-01T12:00:00.1234567890Z"), None);
    }

    #[test]
    fn the_calendar_functions_are_inverse() {
        for days in [-719_468, -1, 0, 1, 11_016, 19_844, 2_932_896] {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(days_from_civil(year, month, day), days, "{year}-{month}-{day}");
        }
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
