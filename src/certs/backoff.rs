//! cert-manager's exponential backoff between failed issuances (seeds/000, "Exponential Backoff for
//! Certificate Issuance"): the next automatic attempt is at `lastFailureTime + 1h × 2^(attempts−1)`, at most
//! 32h after the failure. `cmctl renew` (and `druidctl renew`) bypass it.

use jiff::{SignedDuration, Timestamp};

/// The longest delay between automatic retries (seeds/000: "a maximum backoff period of 32h").
pub const MAX_DELAY: SignedDuration = SignedDuration::from_hours(32);
/// The first delay, also used when `failedIssuanceAttempts` is unset (seeds/000, upgrade case).
pub const BASE_DELAY: SignedDuration = SignedDuration::from_hours(1);

/// Delay after the last failure for `attempts` consecutive failed issuances: 1h, 2h, 4h, … capped at 32h.
///
/// `None` or a non-positive count means the status predates the `failedIssuanceAttempts` field; cert-manager
/// then falls back to the old fixed 1h (seeds/000: "fall back to 1 hour delay … LastFailureTime set, but
/// don't have the IssuanceAttempts set").
pub fn retry_delay(attempts: Option<i64>) -> SignedDuration {
    match attempts {
        Some(n) if n > 1 => {
            // 2^5 h = 32h is the cap; larger exponents would only overflow.
            let exp = (n - 1).min(5) as u32;
            let d = SignedDuration::from_hours(1i64 << exp);
            if d > MAX_DELAY { MAX_DELAY } else { d }
        }
        _ => BASE_DELAY,
    }
}

/// When cert-manager will next retry a failing issuance on its own; `None` when nothing has failed
/// (`lastFailureTime` unset).
pub fn next_retry_at(last_failure_time: Option<Timestamp>, failed_issuance_attempts: Option<i64>) -> Option<Timestamp> {
    let last = last_failure_time?;
    last.checked_add(retry_delay(failed_issuance_attempts)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn no_failure_means_no_automatic_retry_is_pending() {
        assert_eq!(next_retry_at(None, Some(3)), None);
        assert_eq!(next_retry_at(None, None), None);
    }

    #[test]
    fn delays_double_from_one_hour() {
        let last = t("2026-01-01T00:00:00Z");
        assert_eq!(next_retry_at(Some(last), Some(1)), Some(t("2026-01-01T01:00:00Z")));
        assert_eq!(next_retry_at(Some(last), Some(2)), Some(t("2026-01-01T02:00:00Z")));
        // seeds/000 example: third failure → "roughly in 4 hours".
        assert_eq!(next_retry_at(Some(last), Some(3)), Some(t("2026-01-01T04:00:00Z")));
        assert_eq!(next_retry_at(Some(last), Some(4)), Some(t("2026-01-01T08:00:00Z")));
        assert_eq!(next_retry_at(Some(last), Some(6)), Some(t("2026-01-02T08:00:00Z")));
    }

    #[test]
    fn delay_is_capped_at_32_hours() {
        let last = t("2026-01-01T00:00:00Z");
        assert_eq!(next_retry_at(Some(last), Some(7)), Some(t("2026-01-02T08:00:00Z")));
        assert_eq!(next_retry_at(Some(last), Some(1000)), Some(t("2026-01-02T08:00:00Z")));
        assert_eq!(next_retry_at(Some(last), Some(i64::MAX)), Some(t("2026-01-02T08:00:00Z")));
    }

    #[test]
    fn status_from_before_the_attempts_field_retries_after_one_hour() {
        let last = t("2026-01-01T00:00:00Z");
        assert_eq!(next_retry_at(Some(last), None), Some(t("2026-01-01T01:00:00Z")));
        assert_eq!(next_retry_at(Some(last), Some(0)), Some(t("2026-01-01T01:00:00Z")));
    }
}
