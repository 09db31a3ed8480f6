//! Whatever a pod returns, the parser returns a value or an error: never a panic,
//! and accepted arrival counters are finite and not negative.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meter::exposition::{arrival_counts, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(samples) = parse(text) {
        for s in &samples {
            assert!(!s.name.is_empty());
        }
    }
    if let Ok(counts) = arrival_counts(text) {
        assert!(counts.first_attempt.is_finite() && counts.first_attempt >= 0.0);
        assert!(counts.all_attempts.is_finite() && counts.all_attempts >= counts.first_attempt);
    }
});
