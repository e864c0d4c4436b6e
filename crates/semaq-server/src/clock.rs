//! Wall-clock formatting for logs and monitoring (RFC 3339 and nats-server's log stamp),
//! kept dependency-free because only UTC formatting is needed.

use std::time::{Duration, SystemTime};

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

/// Splits a time into UTC calendar fields.
pub fn civil(time: SystemTime) -> Civil {
    let since_epoch = time.duration_since(SystemTime::UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since_epoch.as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400) as u32;
    let (year, month, day) = semaq_store::chain::event_time::civil_from_days(days);
    Civil {
        year,
        month: month as u32,
        day: day as u32,
        hour: of_day / 3600,
        minute: of_day / 60 % 60,
        second: of_day % 60,
        micros: since_epoch.subsec_micros(),
    }
}

/// `2026-11-29T08:56:48.123456Z`.
pub fn rfc3339(time: SystemTime) -> String {
    let c = civil(time);
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", c.year, c.month, c.day, c.hour, c.minute, c.second, c.micros)
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
}
