//! Cron patterns of scheduled messages, as nats-server's `cron.go` reads them: six fields
//! (second, minute, hour, day of month, month, day of week), each `*`, `?`, a number or name
//! (`jan`, `mon`), a range `a-b`, a step `/n`, or a comma list of those. Days match as in
//! classic cron: when both day fields are restricted, either may match. Times are read in the
//! schedule's zone (UTC without one).

use jiff::tz::TimeZone;
use semaq_wire::clock;

use crate::limits;

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
const SECONDS_PER_DAY: i64 = 86_400;

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

    /// The first matching time strictly after `ts` (unix ns) in `zone`, whole seconds; `None`
    /// when none comes within five years (`0 0 0 30 2 *`).
    ///
    /// Walks the fields as cron.go does, so daylight saving changes come out as on nats-server:
    /// a local time the clocks skip never matches that day, one they repeat matches twice, and
    /// a field reset to a skipped local time lands where Go's `time.Date` puts it.
    pub fn next_after(&self, ts: i64, zone: &TimeZone) -> Option<i64> {
        let mut search = Search { zone, next: ts.div_euclid(NANOS_PER_SECOND) + 1, truncated: false, steps: 0 };
        let year_limit = search.local()?.year + 5;
        loop {
            if search.local()?.year > year_limit {
                return None;
            }
            if search.months(self.month)? == Flow::Wrapped
                || search.days(self)? == Flow::Wrapped
                || search.hours(self.hour)? == Flow::Wrapped
                || search.minutes(self.minute)? == Flow::Wrapped
                || search.seconds(self.second)? == Flow::Wrapped
            {
                continue;
            }
            return search.next.checked_mul(NANOS_PER_SECOND);
        }
    }

    fn day_matches(&self, local: &Local) -> bool {
        let (date, weekday) = (local.day, local.weekday);
        let (by_date, by_weekday) = (bit(self.day_of_month, date), bit(self.day_of_week, weekday));
        if self.day_of_month & STAR != 0 || self.day_of_week & STAR != 0 {
            by_date && by_weekday
        } else {
            by_date || by_weekday
        }
    }
}

/// Whether a field's walk ended on a match or wrapped its unit and must start over.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Matched,
    Wrapped,
}

/// A local reading of an instant.
#[derive(Debug, Clone, Copy)]
struct Local {
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    /// Sunday 0.
    weekday: i64,
}

/// cron.go's walk: `next` in unix seconds, read in `zone` at each step.
struct Search<'z> {
    zone: &'z TimeZone,
    next: i64,
    /// Whether the finer fields were reset to their start once (cron.go's `truncated`).
    truncated: bool,
    steps: u32,
}

impl Search<'_> {
    fn local(&self) -> Option<Local> {
        let local = self.next.checked_add(offset_at(self.zone, self.next)?)?;
        let days = local.div_euclid(SECONDS_PER_DAY);
        let of_day = local.rem_euclid(SECONDS_PER_DAY);
        let (year, month, day) = clock::civil_from_days(days);
        let weekday = (days + 4).rem_euclid(7); // 1970-01-01 was a Thursday.
        Some(Local { year, month, day, hour: of_day / 3600, minute: of_day / 60 % 60, second: of_day % 60, weekday })
    }

    /// One more step of the walk; `None` past the bound (no pattern needs that many).
    fn step(&mut self) -> Option<Local> {
        self.steps += 1;
        (self.steps <= limits::CRON_SEARCH_STEPS_MAX).then_some(())?;
        self.local()
    }

    fn months(&mut self, months: u64) -> Option<Flow> {
        let mut at = self.local()?;
        while !bit(months, at.month) {
            if !std::mem::replace(&mut self.truncated, true) {
                self.next = go_date(self.zone, &Local { day: 1, hour: 0, minute: 0, second: 0, ..at })?;
                at = self.local()?;
            }
            self.next = go_date(self.zone, &Local { month: at.month + 1, ..at })?;
            at = self.step()?;
            if at.month == 1 {
                return Some(Flow::Wrapped);
            }
        }
        Some(Flow::Matched)
    }

    fn days(&mut self, cron: &Cron) -> Option<Flow> {
        let mut at = self.local()?;
        while !cron.day_matches(&at) {
            if !std::mem::replace(&mut self.truncated, true) {
                self.next = go_date(self.zone, &Local { hour: 0, minute: 0, second: 0, ..at })?;
                at = self.local()?;
            }
            self.next = go_date(self.zone, &Local { day: at.day + 1, ..at })?;
            at = self.step()?;
            if at.day == 1 {
                return Some(Flow::Wrapped);
            }
        }
        Some(Flow::Matched)
    }

    fn hours(&mut self, hours: u64) -> Option<Flow> {
        let mut at = self.local()?;
        while !bit(hours, at.hour) {
            if !std::mem::replace(&mut self.truncated, true) {
                self.next = go_date(self.zone, &Local { minute: 0, second: 0, ..at })?;
            }
            // Absolute hours, as Go's `Add(time.Hour)`: a repeated hour is walked twice.
            self.next = self.next.checked_add(3600)?;
            at = self.step()?;
            if at.hour == 0 {
                return Some(Flow::Wrapped);
            }
        }
        Some(Flow::Matched)
    }

    fn minutes(&mut self, minutes: u64) -> Option<Flow> {
        let mut at = self.local()?;
        while !bit(minutes, at.minute) {
            if !std::mem::replace(&mut self.truncated, true) {
                // Go's `Truncate(time.Minute)` works on the instant, not the local reading.
                self.next -= self.next.rem_euclid(60);
            }
            self.next = self.next.checked_add(60)?;
            at = self.step()?;
            if at.minute == 0 {
                return Some(Flow::Wrapped);
            }
        }
        Some(Flow::Matched)
    }

    fn seconds(&mut self, seconds: u64) -> Option<Flow> {
        let mut at = self.local()?;
        while !bit(seconds, at.second) {
            // The walk is in whole seconds already: cron.go's truncation to the second is moot.
            self.truncated = true;
            self.next = self.next.checked_add(1)?;
            at = self.step()?;
            if at.second == 0 {
                return Some(Flow::Wrapped);
            }
        }
        Some(Flow::Matched)
    }
}

/// The zone's offset from UTC at `unix` seconds, in seconds.
fn offset_at(zone: &TimeZone, unix: i64) -> Option<i64> {
    let at = jiff::Timestamp::from_second(unix).ok()?;
    Some(i64::from(zone.to_offset(at).seconds()))
}

/// The instant of a local reading, as Go's `time.Date` makes it: months and days past their end
/// carry over; a reading the clocks skip or repeat takes the offset Go's two lookups find (the
/// offset at the reading taken as UTC, checked once against the instant it gives).
fn go_date(zone: &TimeZone, at: &Local) -> Option<i64> {
    let month0 = at.month - 1;
    let (year, month) = (at.year + month0.div_euclid(12), month0.rem_euclid(12) + 1);
    let days = clock::days_from_civil(year, month, 1).checked_add(at.day - 1)?;
    let local = days.checked_mul(SECONDS_PER_DAY)?.checked_add(at.hour * 3600 + at.minute * 60 + at.second)?;
    let guess = offset_at(zone, local)?;
    local.checked_sub(offset_at(zone, local.checked_sub(guess)?)?)
}

/// The loaded zone of a `Nats-Schedule-Time-Zone` name, as Go's `time.LoadLocation` finds it:
/// `UTC`, `Local` (the server's own zone), or an IANA name spelled exactly as the database
/// spells it (the database is bundled, so every server knows the same zones).
pub fn load_zone(name: &str) -> Option<TimeZone> {
    match name {
        "" => None,
        "UTC" => Some(TimeZone::UTC),
        "Local" => Some(TimeZone::system()),
        _ => TimeZone::get(name).ok().filter(|zone| zone.iana_name() == Some(name)),
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
        Cron::parse(pattern).and_then(|cron| cron.next_after(at(after), &TimeZone::UTC)).map(clock::rfc3339_nanos)
    }

    /// The next time in `zone`, written as `2026-03-09T02:30:00-04:00`.
    fn next_in(zone: &str, pattern: &str, after: &str) -> Option<String> {
        let zone = load_zone(zone).expect("zone");
        let next = Cron::parse(pattern)?.next_after(at(after), &zone)?;
        let at = jiff::Timestamp::from_nanosecond(i128::from(next)).ok()?;
        Some(at.display_with_offset(zone.to_offset(at)).to_string())
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
    fn a_zoned_pattern_reads_the_local_clock() {
        // 09:00 in Amsterdam is 08:00 UTC in winter, 07:00 in summer.
        let amsterdam = |after| next_in("Europe/Amsterdam", "0 0 9 * * *", after);
        assert_eq!(amsterdam("2026-01-10T12:00:00Z").as_deref(), Some("2026-01-11T09:00:00+01:00"));
        assert_eq!(amsterdam("2026-07-10T12:00:00Z").as_deref(), Some("2026-07-11T09:00:00+02:00"));
        let kolkata = next_in("Asia/Kolkata", "0 0 0 1 * *", "2026-01-15T00:00:00Z");
        assert_eq!(kolkata.as_deref(), Some("2026-02-01T00:00:00+05:30"));
    }

    /// New York springs forward on 2026-03-08 at 02:00 (to 03:00): 02:30 never happens that day,
    /// so a daily 02:30 skips it, as cron.go's walk does (hours are added as absolute time, and
    /// the day's 02:xx never shows up on the local clock).
    #[test]
    fn a_local_time_the_clocks_skip_does_not_fire_that_day() {
        let ny = |pattern, after| next_in("America/New_York", pattern, after);
        assert_eq!(ny("0 30 2 * * *", "2026-03-07T12:00:00-05:00").as_deref(), Some("2026-03-09T02:30:00-04:00"));
        assert_eq!(ny("0 30 3 * * *", "2026-03-07T12:00:00-05:00").as_deref(), Some("2026-03-08T03:30:00-04:00"));
        // Hourly: 01:00 EST is followed by 03:00 EDT, an hour later.
        assert_eq!(ny("0 0 * * * *", "2026-03-08T01:00:00-05:00").as_deref(), Some("2026-03-08T03:00:00-04:00"));
        // Santiago skips midnight (00:00 to 01:00 on 2026-09-06): the daily midnight skips too.
        let santiago = next_in("America/Santiago", "0 0 0 * * *", "2026-09-05T12:00:00-04:00");
        assert_eq!(santiago.as_deref(), Some("2026-09-07T00:00:00-03:00"));
    }

    /// New York falls back on 2026-11-01 at 02:00 (to 01:00): 01:30 happens twice, and cron.go's
    /// walk matches both, first in EDT, then in EST.
    #[test]
    fn a_local_time_the_clocks_repeat_fires_twice() {
        let ny = |pattern, after| next_in("America/New_York", pattern, after);
        assert_eq!(ny("0 30 1 * * *", "2026-11-01T00:00:00-04:00").as_deref(), Some("2026-11-01T01:30:00-04:00"));
        assert_eq!(ny("0 30 1 * * *", "2026-11-01T01:30:00-04:00").as_deref(), Some("2026-11-01T01:30:00-05:00"));
        assert_eq!(ny("0 30 1 * * *", "2026-11-01T01:30:00-05:00").as_deref(), Some("2026-11-02T01:30:00-05:00"));
        assert_eq!(ny("0 0 * * * *", "2026-11-01T01:00:00-04:00").as_deref(), Some("2026-11-01T01:00:00-05:00"));
    }

    /// Go's `time.Date` puts a skipped local time before the change in zones west of UTC: a
    /// day-of-week walk that resets to Santiago's missing midnight lands on the evening before
    /// and goes on from there, so that week's Sunday midnight is missed, as on nats-server.
    #[test]
    fn a_reset_to_a_skipped_midnight_lands_where_go_puts_it() {
        let santiago = next_in("America/Santiago", "0 0 0 * * sun", "2026-09-04T12:00:00-04:00");
        assert_eq!(santiago.as_deref(), Some("2026-09-13T00:00:00-03:00"));
        // East of UTC the same reset lands after the change: Amsterdam's skipped 02:30 becomes 03:30.
        let amsterdam = load_zone("Europe/Amsterdam").expect("zone");
        let reading = Local { year: 2026, month: 3, day: 29, hour: 2, minute: 30, second: 0, weekday: 0 };
        assert_eq!(go_date(&amsterdam, &reading), Some(at("2026-03-29T03:30:00+02:00") / NANOS_PER_SECOND));
        let new_york = load_zone("America/New_York").expect("zone");
        let reading = Local { year: 2026, month: 3, day: 8, hour: 2, minute: 30, second: 0, weekday: 0 };
        assert_eq!(go_date(&new_york, &reading), Some(at("2026-03-08T01:30:00-05:00") / NANOS_PER_SECOND));
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
