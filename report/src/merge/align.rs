//! The merge's clock alignment: each node's offset onto the reference node's axis, from the
//! realtime anchors first, then from the collectives both nodes recorded (see the module
//! documentation of `merge`).

use mlprof_format::runfile::NodeInfo;

use super::scan::{Key, Scan};

/// Offset that puts `node`'s times on `to`'s axis, from their common collectives: (offset
/// relative to `to`, pairs, interquartile range). Op ranges when both have them, else NCCL.
fn match_collectives(to: &Scan, node: &Scan) -> Option<(i64, u64, u64)> {
    let pairs = |op: bool| -> Vec<i64> {
        let mut d: Vec<i64> = node
            .ends
            .iter()
            .filter(|(key, _)| matches!(key, Key::Op(..)) == op)
            .filter_map(|(key, &end)| to.ends.get(key).map(|&theirs| theirs as i64 - end as i64))
            .collect();
        d.sort_unstable();
        d
    };
    let mut d = pairs(true);
    if d.is_empty() {
        d = pairs(false);
    }
    if d.is_empty() {
        return None;
    }
    let at = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize];
    Some((at(0.5), d.len() as u64, (at(0.75) - at(0.25)) as u64))
}

/// The clock offsets of every node (see the module documentation).
pub(super) fn align(scans: &[Scan]) -> Vec<NodeInfo> {
    let reference = scans
        .iter()
        .enumerate()
        .min_by_key(|(i, s)| (s.lowest_rank.is_none(), s.lowest_rank, *i))
        .map_or(0, |(i, _)| i);
    let anchor = |s: &Scan| s.info.start_realtime_ns as i128 - s.info.start_mono_ns as i128;
    let guess = |s: &Scan| (anchor(s) - anchor(&scans[reference])) as i64;
    let mut nodes: Vec<NodeInfo> = scans
        .iter()
        .enumerate()
        .map(|(i, s)| NodeInfo {
            node: i as u32,
            host: s.info.host.clone(),
            source: s.path.display().to_string(),
            start_mono_ns: s.info.start_mono_ns,
            start_realtime_ns: s.info.start_realtime_ns,
            offset_ns: guess(s),
            realtime_offset_ns: guess(s),
            alignment: "realtime".into(),
            aligned_to: reference as u32,
            ..Default::default()
        })
        .collect();
    nodes[reference].alignment = "reference".into();
    nodes[reference].offset_ns = 0;
    let mut aligned = vec![reference];
    loop {
        // The unaligned node with the most collectives in common with an aligned one.
        let best = (0..scans.len())
            .filter(|i| !aligned.contains(i))
            .flat_map(|i| aligned.iter().map(move |&j| (i, j)))
            .filter_map(|(i, j)| match_collectives(&scans[j], &scans[i]).map(|m| (i, j, m)))
            .max_by_key(|&(i, j, (_, pairs, _))| (pairs, std::cmp::Reverse((j != reference, i))));
        let Some((i, j, (offset, pairs, residual))) = best else { break };
        nodes[i].offset_ns = nodes[j].offset_ns + offset;
        nodes[i].alignment = "collectives".into();
        nodes[i].aligned_to = j as u32;
        nodes[i].matched = pairs;
        nodes[i].residual_ns = Some(residual);
        aligned.push(i);
    }
    // The reference's own figures: the closest node's match, for the summary's table.
    if let Some(other) =
        nodes.iter().find(|n| n.aligned_to == reference as u32 && n.alignment == "collectives")
    {
        let (matched, residual) = (other.matched, other.residual_ns);
        nodes[reference].matched = matched;
        nodes[reference].residual_ns = residual;
    }
    nodes
}

/// Shifts every node's offset by the same amount when one would put a node's start before 0
/// (a node whose clock is behind the reference's), keeping every time on the axis
/// non-negative.
pub(super) fn keep_times_non_negative(nodes: &mut [NodeInfo], scans: &[Scan]) {
    let lowest =
        nodes.iter().zip(scans).map(|(n, s)| s.info.start_mono_ns as i128 + n.offset_ns as i128).min();
    if let Some(lowest) = lowest.filter(|&l| l < 0) {
        for n in nodes {
            n.offset_ns += (-lowest) as i64;
        }
    }
}
