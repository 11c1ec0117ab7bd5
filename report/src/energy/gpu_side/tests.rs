use super::*;
use crate::energy::load::{Span, SpanKey};
use crate::run::RunMeta;

const MS: u64 = 1_000_000;

/// One GPU at 1 W (1 mJ a ms) over 0–100 ms; ops `conv` (10–30 ms) and `relu` (50–60 ms) on
/// thread 7 of pid 7, `relu` nested in nothing, `conv` holding a launch at 12 ms; a launch at
/// 40 ms outside any op; kernels: `conv`'s 20–40 ms, the outside one's 40–50 ms, `relu`'s
/// 55–65 ms (launched at 52 ms), and an unlinked one 80–90 ms.
fn run() -> EnergyRun {
    let gpu = crate::energy::testing::gpu(&[(0, 0), (100 * MS, 100_000)]);
    let key = |name: &str, layer: &str| SpanKey {
        name: name.into(),
        class: layer.into(),
        layer: layer.into(),
        shapes: Default::default(),
    };
    let span = |start, end, key| Span { start: start * MS, end: end * MS, key, pid: 7, tid: 7 };
    let work = |start: u64, end: u64, launch: Option<u64>| GpuWork {
        device: 0,
        start: start * MS,
        end: end * MS,
        pid: 7,
        launch: launch.map(|at| (7, at * MS)),
    };
    EnergyRun {
        meta: RunMeta::default(),
        devices: vec![gpu],
        notes: Vec::new(),
        keys: vec![key("conv", "itt:PyTorch"), key("relu", "itt:PyTorch"), key("step", "itt:mlprof.phase")],
        // The phase around everything is mlprof's own: not an op.
        spans: vec![span(0, 100, 2), span(10, 30, 0), span(50, 60, 1)],
        gpu_work: vec![
            work(20, 40, Some(12)),
            work(40, 50, Some(40)),
            work(55, 65, Some(52)),
            work(80, 90, None),
        ],
        start_ns: 0,
        end_ns: 100 * MS,
    }
}

#[test]
fn each_kernel_s_energy_goes_to_the_op_that_launched_it_and_the_rest_is_idle() {
    let run = run();
    let curve = EnergyRun::curve(&run.devices[0]).unwrap();
    let curves = vec![(&run.devices[0], curve)];
    let side = gpu_side(&run, &curves).unwrap();
    // 1 W: a kernel of 20 ms gets 20 mJ, one of 10 ms 10 mJ; no two overlap.
    let j = |key: u32| side.per_key.get(&key).map_or(0.0, |f| f.energy);
    assert!((j(0) - 0.020).abs() < 1e-9, "conv {}", j(0));
    assert!((j(1) - 0.010).abs() < 1e-9, "relu {}", j(1));
    assert!((side.outside.energy - 0.020).abs() < 1e-9, "outside {}", side.outside.energy);
    // Busy 50 of 100 ms: 50 mJ idle; all of it adds up to the 100 mJ measured.
    assert!((side.idle.energy - 0.050).abs() < 1e-9, "idle {}", side.idle.energy);
    let sum = j(0) + j(1) + side.outside.energy + side.idle.energy;
    assert!((sum - side.measured_j).abs() < 1e-9 && (side.measured_j - 0.1).abs() < 1e-9);
    assert_eq!(side.unmatched_work, 0);
}

#[test]
fn the_innermost_span_around_a_launch_is_its_op() {
    let mut ops = HashMap::new();
    // outer 0–100 holds a 10–20 sibling that ended and a 30–60 one holding 40–50.
    ops.insert((1, 1), vec![(0, 100, 0), (10, 20, 1), (30, 60, 2), (40, 50, 3)]);
    assert_eq!(op_around(&ops, 1, 1, 45), Some(3));
    assert_eq!(op_around(&ops, 1, 1, 55), Some(2));
    assert_eq!(op_around(&ops, 1, 1, 25), Some(0), "past a sibling that ended");
    assert_eq!(op_around(&ops, 1, 1, 150), None);
    assert_eq!(op_around(&ops, 1, 2, 45), None, "another thread");
}

#[test]
fn the_report_gives_each_op_its_kernels_gpu_energy_and_adds_the_gpu_side_rows() {
    let report = crate::energy::EnergyReport::compute(&run());
    let row = |name: &str| report.spans.iter().find(|s| s.name == name).map(|s| (s.energy_j, s.gpu_j));
    // The fixture has no CPU device: an op's energy is its kernels' GPU energy alone, not its
    // host span's share (conv's span is 20 ms, but so is its kernel; relu's span is 10 ms and
    // its kernel 10 ms too, half of it after the span ended).
    let near = |got: Option<(f64, f64)>, want: f64| {
        got.is_some_and(|(e, g)| (e - want).abs() < 1e-9 && (g - want).abs() < 1e-9)
    };
    assert!(near(row("conv"), 0.020), "{:?}", row("conv"));
    assert!(near(row("relu"), 0.010), "{:?}", row("relu"));
    assert!(near(row("(GPU idle)"), 0.050), "{:?}", row("(GPU idle)"));
    assert!(near(row("(GPU work outside any op)"), 0.020), "{:?}", row("(GPU work outside any op)"));
    let totals = report.gpu_side.unwrap();
    assert!((totals.ops_j + totals.idle_j + totals.outside_j - report.measured_j).abs() < 1e-9);
}
