//! `Semaq-Event-Time`: RFC 3339 (`2026-05-01T12:00:00.5Z`, `...+02:00`) or integer unix
//! nanoseconds. Kept dependency-free: the chain hashes the parsed nanoseconds, so the server and
//! the verifier must read the text identically, and this is all the calendar either needs.

const NANOS_PER_SECOND: i64 = 1_000_000_000;
const SECONDS_PER_DAY: i64 = 86_400;
/// Fraction digits RFC 3339 text may carry here (nanosecond resolution).
const FRACTION_DIGITS_MAX: usize = 9;

/// Unix nanoseconds from an event time header value; `None` if it is neither form or out of
/// the `i64` nanosecond range (years 1678 to 2262).
pub fn parse_event_time(text: &str) -> Option<i64> {
    let text = text.trim();
    let digits = text.strip_prefix('-').unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok();
    }
    parse_rfc3339(text.as_bytes())
}

fn parse_rfc3339(text: &[u8]) -> Option<i64> {
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
    let mut rest = &text[19..];
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

/// RFC 3339 in UTC with nanoseconds, e.g. `2026-05-01T12:00:00.500000000Z`, for error messages.
pub fn format_event_time(unix_ns: i64) -> String {
    let seconds = unix_ns.div_euclid(NANOS_PER_SECOND);
    let nanos = unix_ns.rem_euclid(NANOS_PER_SECOND);
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z", of_day / 3600, of_day / 60 % 60, of_day % 60)
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

/// Days since 1970-01-01 (Howard Hinnant's days-from-civil).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
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
    fn both_forms_are_read() {
        assert_eq!(parse_event_time("0"), Some(0));
        assert_eq!(parse_event_time(" 1714564800123456789 "), Some(1_714_564_800_123_456_789));
        assert_eq!(parse_event_time("-5"), Some(-5));
        assert_eq!(parse_event_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_event_time("2024-05-01T12:00:00Z"), Some(1_714_564_800 * NANOS_PER_SECOND));
        assert_eq!(parse_event_time("2024-05-01T12:00:00.5Z"), Some(1_714_564_800 * NANOS_PER_SECOND + 500_000_000));
        assert_eq!(parse_event_time("2024-05-01t14:00:00.000000001+02:00"), Some(1_714_564_800 * NANOS_PER_SECOND + 1));
        assert_eq!(parse_event_time("2024-05-01T11:30:00-00:30"), Some(1_714_564_800 * NANOS_PER_SECOND));
        assert_eq!(parse_event_time("2024-02-29T00:00:00Z"), Some(1_709_164_800 * NANOS_PER_SECOND));
    }

    #[test]
    fn malformed_times_are_refused() {
        for text in [
            "",
            "-",
            "soon",
            "12.5",
            "99999999999999999999",
            "2024-05-01",
            "2024-05-01T12:00:00",
            "2024-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T12:00:00.Z",
            "2024-05-01T12:00:00.1234567890Z",
            "2024-05-01T12:00:00+2:00",
            "2024-05-01T12:00:00Zjunk",
            "3000-01-01T00:00:00Z",
        ] {
            assert_eq!(parse_event_time(text), None, "{text:?}");
        }
    }

    #[test]
    fn formatting_round_trips() {
        for ns in [0, 1, 1_714_564_800_123_456_789, -1, -86_400_000_000_001, 951_782_400_000_000_000] {
            let text = format_event_time(ns);
            assert_eq!(parse_event_time(&text), Some(ns), "{text}");
        }
        assert_eq!(format_event_time(1_714_564_800_500_000_000), "2024-05-01T12:00:00.500000000Z");
    }
}
