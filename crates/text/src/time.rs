//! Dates, in UTC, without a date crate: the one calendar computation the saved conversations'
//! ids and a worktree's default branch need.

use std::time::{SystemTime, UNIX_EPOCH};

/// The UTC calendar date and time of `at` (the days-to-civil algorithm of H. Hinnant's
/// `chrono`-compatible date library, proleptic Gregorian).
pub fn civil(at: SystemTime) -> (i64, u32, u32, u32, u32, u32) {
    let secs = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    let rest = rest as u32;
    (y, m, d, rest / 3600, rest / 60 % 60, rest % 60)
}
