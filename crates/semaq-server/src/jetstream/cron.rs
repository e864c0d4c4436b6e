//! Cron patterns of scheduled messages, as nats-server's `cron.go` reads them: six fields
//! (second, minute, hour, day of month, month, day of week), each `*`, `?`, a number or name
//! (`jan`, `mon`), a range `a-b`, a step `/n`, or a comma list of those. Days match as in
//! classic cron: when both day fields are restricted, either may match. Times are UTC.

use semaq_wire::clock;

/// The allowed values of one field.
struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const SECONDS: Bounds = Bounds { min: 0, max: 59, names: &[] };
const MINUTES: Bounds = Bounds { min: 0, max: 59, names: &[] };
const HOURS: Bounds = Bounds { min: 0, max: 23, names: &[] };
const DAYS_OF_MONTH: Bounds = Bounds { min: 1, max: 31, names: &[] };
/// Index + 1 is the month.
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
};
/// Index is the day (Sunday 0).
const DAYS_OF_WEEK: Bounds = Bounds { min: 0, max: 6, names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"] };

/// Marks a field written `*` (or `?`): "any", which changes how the day fields combine.
const STAR: u64 = 1 << 63;

const NANOS_PER_SECOND: i64 = 1_000_000_000;

/// A parsed pattern: one bit per allowed value of each field.
#[derive(Debug, Clone, Copy)]
pub struct Cron {
    second: u64,
    minute: u64,
    hour: u64,
    day_of_month: u64,
    month: u64,
    day_of_week: u64,
}

impl Cron {
    /// Parses six fields, or a nats-server shorthand (`@hourly`, `@daily`, ...); `None` if invalid.
    pub fn parse(pattern: &str) -> Option<Self> {
        let pattern = match pattern {
            "@yearly" | "@annually" => "0 0 0 1 1 *",
            "@monthly" => "0 0 0 1 * *",
            "@weekly" => "0 0 0 * * 0",
            "@daily" | "@midnight" => "0 0 0 * * *",
            "@hourly" => "0 0 * * * *",
            other => other,
        };
        let fields: Vec<&str> = pattern.split_whitespace().collect();
        let [second, minute, hour, day_of_month, month, day_of_week] = fields.as_slice() else { return None };
        Some(Self {
            second: field(second, &SECONDS)?,
            minute: field(minute, &MINUTES)?,
            hour: field(hour, &HOURS)?,
            day_of_month: field(day_of_month, &DAYS_OF_MONTH)?,
            month: field(month, &MONTHS)?,
            day_of_week: field(day_of_week, &DAYS_OF_WEEK)?,
        })
    }

    /// The first matching time strictly after `ts` (unix ns), whole seconds; `None` when none
    /// comes within five years (`0 0 0 30 2 *`).
    pub fn next_after(&self, ts: i64) -> Option<i64> {
        let start = ts.div_euclid(NANOS_PER_SECOND) + 1;
        let year_limit = clock::civil_from_days(start.div_euclid(86_400)).0 + 5;
        // Walks days, then seconds of a matching day: at most ~1,830 days and 86,400 seconds.
        let mut day = start.div_euclid(86_400);
        let mut first_second = start.rem_euclid(86_400);
        loop {
            let (year, month, date) = clock::civil_from_days(day);
            if year > year_limit {
                return None;
            }
            let weekday = (day + 4).rem_euclid(7); // 1970-01-01 was a Thursday.
            if bit(self.month, month) && self.day_matches(date, weekday) {
                if let Some(second) = self.second_of_day(first_second) {
                    return (day * 86_400 + second).checked_mul(NANOS_PER_SECOND);
                }
            }
            day += 1;
            first_second = 0;
        }
    }

    fn day_matches(&self, date: i64, weekday: i64) -> bool {
        let (by_date, by_weekday) = (bit(self.day_of_month, date), bit(self.day_of_week, weekday));
        if self.day_of_month & STAR != 0 || self.day_of_week & STAR != 0 {
            by_date && by_weekday
        } else {
            by_date || by_weekday
        }
    }

    /// The first matching second of the day at or after `from`.
    fn second_of_day(&self, from: i64) -> Option<i64> {
        (from..86_400).find(|s| bit(self.hour, s / 3600) && bit(self.minute, s / 60 % 60) && bit(self.second, s % 60))
    }
}

fn bit(bits: u64, value: i64) -> bool {
    (0..63).contains(&value) && bits & (1 << value) != 0
}

/// One field: a comma list of ranges; at least one value (else no time could ever match).
fn field(text: &str, bounds: &Bounds) -> Option<u64> {
    let bits =
        text.split(',').filter(|part| !part.is_empty()).try_fold(0, |bits, part| Some(bits | range(part, bounds)?))?;
    (bits & !STAR != 0).then_some(bits)
}

/// `*`, `a`, `a-b`, each optionally `/step`, as cron.go's `getRange`.
fn range(expr: &str, bounds: &Bounds) -> Option<u64> {
    let mut parts = expr.split('/');
    let span = parts.next()?;
    let step = parts.next();
    if parts.next().is_some() {
        return None;
    }
    let ends: Vec<&str> = span.split('-').collect();
    let (mut start, mut end, mut extra) = (bounds.min, bounds.max, 0);
    if ends[0] == "*" || ends[0] == "?" {
        extra = STAR;
    } else {
        start = number(ends[0], bounds)?;
        end = match ends.as_slice() {
            [_] => start,
            [_, high] => number(high, bounds)?,
            _ => return None,
        };
    }
    let step = match step {
        None => 1,
        Some(step) => {
            let step: u32 = step.parse().ok()?;
            if ends.len() == 1 {
                end = bounds.max;
            }
            if step > 1 {
                extra = 0;
            }
            step
        }
    };
    if start < bounds.min || end > bounds.max || start > end || step == 0 {
        return None;
    }
    let bits = (start..=end).step_by(usize::try_from(step).ok()?).fold(0u64, |bits, value| bits | 1 << value);
    Some(bits | extra)
}

fn number(text: &str, bounds: &Bounds) -> Option<u32> {
    let lower = text.to_ascii_lowercase();
    match bounds.names.iter().position(|name| *name == lower) {
        // Names count from the field's minimum: `jan` is 1, `sun` 0.
        Some(index) => Some(u32::try_from(index).ok()? + bounds.min),
        None => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        clock::parse_rfc3339(text).expect("time")
    }

    fn next(pattern: &str, after: &str) -> Option<String> {
        Cron::parse(pattern).and_then(|cron| cron.next_after(at(after))).map(clock::rfc3339_nanos)
    }

    #[test]
    fn fields_read_as_cron_go_reads_them() {
        assert_eq!(next("0 30 * * * *", "2026-01-01T10:29:59Z").as_deref(), Some("2026-01-01T10:30:00.000000000Z"));
        assert_eq!(next("0 30 * * * *", "2026-01-01T10:30:00Z").as_deref(), Some("2026-01-01T11:30:00.000000000Z"));
        assert_eq!(next("*/15 * * * * *", "2026-01-01T10:00:01Z").as_deref(), Some("2026-01-01T10:00:15.000000000Z"));
        assert_eq!(
            next("0 0 9 * * mon-fri", "2026-01-03T00:00:00Z").as_deref(),
            Some("2026-01-05T09:00:00.000000000Z")
        );
        assert_eq!(next("0 0 0 1 jan *", "2026-06-01T00:00:00Z").as_deref(), Some("2027-01-01T00:00:00.000000000Z"));
        assert_eq!(next("@hourly", "2026-01-01T10:00:00Z").as_deref(), Some("2026-01-01T11:00:00.000000000Z"));
        // Both day fields restricted: either matches (the 13th, or a Friday).
        assert_eq!(next("0 0 0 13 * fri", "2026-02-01T00:00:00Z").as_deref(), Some("2026-02-06T00:00:00.000000000Z"));
    }

    #[test]
    fn impossible_and_malformed_patterns_are_refused() {
        assert_eq!(next("0 0 0 30 2 *", "2026-01-01T00:00:00Z"), None, "no 30th of February within 5 years");
        for bad in [
            ", * * * * *",
            "* * * * *",
            "60 * * * * *",
            "* * * * 13 *",
            "5-1 * * * * *",
            "*/0 * * * * *",
            "a * * * * *",
        ] {
            assert!(Cron::parse(bad).is_none(), "{bad}");
        }
    }
}
