//! Numbers for bench reports: latency histograms, human formatting, medians and ratios.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Latencies are recorded in nanoseconds; anything beyond a minute is clamped (a stalled run, not a latency).
const LATENCY_NS_MAX: u64 = 60_000_000_000;

/// Three significant digits: 0.1% resolution, enough to tell p99 from p999.
const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;

/// The percentiles every report prints, as (label, quantile).
pub const PERCENTILES: [(&str, f64); 4] = [("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p999", 0.999)];

/// An empty latency histogram with the bench's bounds.
pub fn latency_histogram() -> Histogram<u64> {
    match Histogram::new_with_bounds(1, LATENCY_NS_MAX, LATENCY_SIGNIFICANT_DIGITS) {
        Ok(histogram) => histogram,
        // The bounds are constants that hdrhistogram accepts; this arm cannot run.
        Err(_) => unreachable!("constant histogram bounds are valid"),
    }
}

/// Records one latency, clamping to the histogram's range.
pub fn record_latency(histogram: &mut Histogram<u64>, latency: Duration) {
    let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
    histogram.saturating_record(nanos.clamp(1, LATENCY_NS_MAX));
}

/// Formats nanoseconds with a unit that keeps three or four significant digits: `850 ns`, `12.3 µs`, `1.25 ms`.
pub fn format_latency_ns(nanos: u64) -> String {
    let value = nanos as f64;
    if nanos < 1_000 {
        format!("{nanos} ns")
    } else if nanos < 1_000_000 {
        format!("{:.1} µs", value / 1e3)
    } else if nanos < 1_000_000_000 {
        format!("{:.2} ms", value / 1e6)
    } else {
        format!("{:.2} s", value / 1e9)
    }
}

/// `p50 85.0 µs  p90 ...` for the standard percentiles, plus the maximum.
pub fn format_percentiles(histogram: &Histogram<u64>) -> String {
    if histogram.is_empty() {
        return "no samples".to_string();
    }
    let mut parts: Vec<String> = PERCENTILES
        .iter()
        .map(|(label, quantile)| format!("{label} {}", format_latency_ns(histogram.value_at_quantile(*quantile))))
        .collect();
    parts.push(format!("max {}", format_latency_ns(histogram.max())));
    parts.join("  ")
}

/// Formats an integer with thousands separators: `1,234,567`.
pub fn format_count(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// Formats a byte count per item, e.g. RSS per connection: `850 B`, `12.3 KiB`, `1.50 MiB`.
pub fn format_bytes(bytes: f64) -> String {
    let magnitude = bytes.abs();
    if magnitude < 1024.0 {
        format!("{bytes:.0} B")
    } else if magnitude < 1024.0 * 1024.0 {
        format!("{:.1} KiB", bytes / 1024.0)
    } else {
        format!("{:.2} MiB", bytes / (1024.0 * 1024.0))
    }
}

/// Median of the values (mean of the middle two for an even count); `None` when empty or not comparable.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|value| value.is_nan()) {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 { sorted[middle] } else { (sorted[middle - 1] + sorted[middle]) / 2.0 })
}

/// Median of the per-round ratios `a[i] / b[i]`; rounds where `b` is zero carry no ratio and are skipped.
pub fn median_ratio(a: &[f64], b: &[f64]) -> Option<f64> {
    let ratios: Vec<f64> = a.iter().zip(b).filter(|(_, b)| **b != 0.0).map(|(a, b)| a / b).collect();
    median(&ratios)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_units_scale() {
        assert_eq!(format_latency_ns(850), "850 ns");
        assert_eq!(format_latency_ns(12_345), "12.3 µs");
        assert_eq!(format_latency_ns(1_250_000), "1.25 ms");
        assert_eq!(format_latency_ns(2_000_000_000), "2.00 s");
    }

    #[test]
    fn percentiles_are_listed_in_order() {
        let mut histogram = latency_histogram();
        for micros in 1..=1000u64 {
            record_latency(&mut histogram, Duration::from_micros(micros));
        }
        let text = format_percentiles(&histogram);
        assert!(text.starts_with("p50 500"), "{text}");
        let positions: Vec<usize> = ["p50", "p90", "p99", "p999", "max"].iter().filter_map(|l| text.find(l)).collect();
        assert_eq!(positions.len(), 5);
        assert!(positions.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!(format_percentiles(&latency_histogram()), "no samples");
    }

    #[test]
    fn counts_get_separators() {
        assert_eq!(format_count(0), "0");
        assert_eq!(format_count(999), "999");
        assert_eq!(format_count(1_000), "1,000");
        assert_eq!(format_count(1_234_567), "1,234,567");
    }

    #[test]
    fn bytes_scale() {
        assert_eq!(format_bytes(512.0), "512 B");
        assert_eq!(format_bytes(12_595.2), "12.3 KiB");
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn median_ratio_pairs_rounds() {
        let semaq = [110.0, 90.0, 100.0];
        let nats = [100.0, 100.0, 100.0];
        assert_eq!(median_ratio(&semaq, &nats), Some(1.0));
        assert_eq!(median_ratio(&[1.0], &[0.0]), None);
        assert_eq!(median_ratio(&[2.0, 4.0], &[1.0, 1.0]), Some(3.0));
    }
}
