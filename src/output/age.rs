//! Human durations the way kubectl prints ages (`45s`, `3m12s`, `5h`, `2d3h`).

use jiff::Timestamp;

/// Formats a duration in seconds like kubectl's `HumanDuration` (negative values print as `0s`).
pub fn human(seconds: i64) -> String {
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 { format!("{m}m") } else { format!("{m}m{}s", s % 60) }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 { format!("{h}h") } else { format!("{h}h{}m", m % 60) }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 { format!("{d}d") } else { format!("{d}d{}h", h % 24) }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
}

/// Seconds from `then` to `now`.
pub fn seconds_between(then: Timestamp, now: Timestamp) -> i64 {
    now.as_second() - then.as_second()
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human(5), "5s");
        assert_eq!(human(119), "119s");
        assert_eq!(human(192), "3m12s");
        assert_eq!(human(600), "10m");
        assert_eq!(human(5 * 3600 + 60), "5h1m");
        assert_eq!(human(30 * 3600), "30h");
        assert_eq!(human(3 * 86400 + 3600), "3d1h");
        assert_eq!(human(-4), "0s");
    }
}
