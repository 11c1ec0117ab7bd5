//! Exclusive time per category of a main process (see `crate::host_time::exclusive_times`).

use super::Category;

/// Time in `[from, to)` covered by the intervals of each category, each instant counted once
/// in the first (highest-priority) category active at it.
pub(crate) fn exclusive_times(intervals: &[(Category, u64, u64)], from: u64, to: u64) -> [u64; 4] {
    crate::host_time::exclusive_times(intervals, |category| category as usize, from, to)
}
