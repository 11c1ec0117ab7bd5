//! Exclusive time per category: a sweep over the interval ends.

use super::Category;

/// Time in `[from, to)` covered by the intervals of each category, each instant counted once
/// in the first (highest-priority) category active at it. Intervals may overlap and nest in
/// any way (threads of one process, spans around calls); parts outside `[from, to)` are cut.
pub(crate) fn exclusive_times(intervals: &[(Category, u64, u64)], from: u64, to: u64) -> [u64; 4] {
    let mut edges: Vec<(u64, i8, u8)> = Vec::with_capacity(intervals.len() * 2);
    for &(category, start, end) in intervals {
        let (start, end) = (start.clamp(from, to), end.clamp(from, to));
        if start < end {
            edges.push((start, 1, category as u8));
            edges.push((end, -1, category as u8));
        }
    }
    edges.sort_unstable_by_key(|&(t, _, _)| t);
    let mut active = [0i64; 4];
    let mut out = [0u64; 4];
    let mut last = from;
    for (t, delta, category) in edges {
        if t > last {
            if let Some(top) = active.iter().position(|&n| n > 0) {
                out[top] += t - last;
            }
            last = t;
        }
        active[category as usize] += delta as i64;
    }
    out
}
