//! The clock alignment on made-up scans.

use super::scan::Key;
use super::*;
use mlprof_format::string_id;

fn scan_with(host: &str, mono: u64, realtime: u64, rank: Option<u32>, ends: &[(Key, u64)]) -> Scan {
    Scan {
        path: PathBuf::from(format!("{host}.bin")),
        info: RunInfo {
            host: host.into(),
            start_mono_ns: mono,
            start_realtime_ns: realtime,
            ..Default::default()
        },
        ends: ends.iter().copied().collect(),
        pids: HashSet::new(),
        lowest_rank: rank,
        processes: 0,
    }
}

#[test]
fn collectives_correct_a_wrong_realtime_guess() {
    const S: u64 = 1_000_000_000;
    // Node b booted 1000 s later than node a's clock says (monotonic far behind), and its
    // wall clock is 3 s fast: the anchors alone would be 3 s off.
    let true_offset: i64 = 1000 * S as i64;
    let op = string_id(b"gloo:all_reduce");
    let a_ends: Vec<(Key, u64)> = (0..9).map(|n| (Key::Op(op, n), 2000 * S + n as u64 * 7_000_000)).collect();
    let jitter = [0i64, 30_000, -20_000, 10_000, 0, 50_000, -40_000, 5_000, 2_000];
    let b_ends: Vec<(Key, u64)> =
        a_ends.iter().zip(jitter).map(|(&(k, t), j)| (k, (t as i64 - true_offset + j) as u64)).collect();
    let a = scan_with("a", 1500 * S, 1_700_000_000 * S, Some(0), &a_ends);
    let b = scan_with("b", 500 * S, 1_700_000_000 * S + 3 * S, Some(1), &b_ends);
    let c = scan_with("c", 10 * S, 1_700_000_000 * S, None, &[]);
    let nodes = align(&[b, a, c]);
    let (b, a, c) = (&nodes[0], &nodes[1], &nodes[2]);
    assert_eq!((a.alignment.as_str(), a.offset_ns), ("reference", 0));
    assert_eq!(b.alignment, "collectives");
    assert_eq!(b.realtime_offset_ns, true_offset + 3 * S as i64);
    assert!((b.offset_ns - true_offset).abs() <= 10_000, "{}", b.offset_ns - true_offset);
    assert_eq!(b.matched, 9);
    assert!(b.residual_ns.unwrap() <= 40_000);
    assert_eq!((c.alignment.as_str(), c.offset_ns), ("realtime", 1490 * S as i64));
}
