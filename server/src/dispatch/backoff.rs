//! How long to wait before retrying a failed attempt.

use crate::jobs::{Backoff, Retry};

/// The delay before attempt `failed_attempt + 1`, with jitter: a uniform draw between half and
/// all of the nominal delay (`jitter` in [0, 1)), so retries of many runs spread out.
pub fn retry_delay_ms(retry: &Retry, failed_attempt: u32, jitter: f64) -> i64 {
    let initial = retry.initial_delay_ms.min(retry.max_delay_ms);
    let nominal = match retry.backoff {
        Backoff::Fixed => initial,
        Backoff::Exponential => {
            let factor = 1u64
                .checked_shl(failed_attempt.saturating_sub(1).min(62))
                .unwrap_or(u64::MAX);
            initial.saturating_mul(factor).min(retry.max_delay_ms)
        }
    };
    let jitter = jitter.clamp(0.0, 1.0);
    let delay = nominal as f64 * (0.5 + 0.5 * jitter);
    delay as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_doubles_up_to_the_cap_and_jitter_stays_within_half() {
        let retry = Retry {
            max_attempts: 10,
            backoff: Backoff::Exponential,
            initial_delay_ms: 1_000,
            max_delay_ms: 5_000,
        };
        let nominal: Vec<i64> = (1..=5).map(|n| retry_delay_ms(&retry, n, 1.0)).collect();
        assert_eq!(nominal, vec![1_000, 2_000, 4_000, 5_000, 5_000]);
        assert_eq!(retry_delay_ms(&retry, 2, 0.0), 1_000);
        let fixed = Retry {
            backoff: Backoff::Fixed,
            ..retry
        };
        assert_eq!(retry_delay_ms(&fixed, 7, 1.0), 1_000);
    }
}
