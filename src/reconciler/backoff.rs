//! Capped exponential backoff for transient errors.

use std::time::Duration;

/// Retry policy for transient errors of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub base: Duration,
    /// Largest delay.
    pub cap: Duration,
    /// Failures of one step after which the task fails.
    pub max_attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { base: Duration::from_secs(1), cap: Duration::from_secs(60), max_attempts: 10 }
    }
}

impl Backoff {
    /// The delay after the `attempt`-th failure (1-based): base·2^(attempt-1), at most `cap`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(30));
        self.base.saturating_mul(factor).min(self.cap)
    }
    /// Whether another attempt is allowed after `attempt` failures.
    pub fn allows(&self, attempt: u32) -> bool {
        attempt < self.max_attempts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_doubles_up_to_the_cap() {
        let b = Backoff { base: Duration::from_secs(1), cap: Duration::from_secs(10), max_attempts: 5 };
        let d: Vec<u64> = (1..=6).map(|a| b.delay(a).as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 8, 10, 10]);
        assert_eq!(b.delay(1000), Duration::from_secs(10));
        assert!(b.allows(4) && !b.allows(5));
    }
}
