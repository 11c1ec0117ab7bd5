//! `mlprof energy` as text: devices, run total, coverage, processes, span names and classes;
//! and the operator table of `--ops`.

use std::io::{self, Write};

use super::attribution::{EnergyReport, SpanEnergy};
use super::json::round;

/// A figure as the JSON report has it: rounded, and absent when not finite (JSON has no NaN).
/// The device and process rows show these, so the tables agree with `--json` to the digit.
fn as_in_json(x: f64, digits: i32) -> Option<f64> {
    let rounded = round(x, digits);
    rounded.is_finite().then_some(rounded)
}

/// The report; `top` rows in the per-span table.
pub fn write(report: &EnergyReport, top: usize, out: &mut dyn Write) -> io::Result<()> {
    let duration_s = report.duration_s();
    writeln!(out, "Energy of {} ({:.3} s)", report.command_line, duration_s)?;
    for note in &report.notes {
        writeln!(out, "  note: {note}")?;
    }
    writeln!(out)?;
    write_devices(report, out)?;
    writeln!(out)?;
    writeln!(
        out,
        "coverage: spans explain {:.3} J of {:.3} J measured ({:.1}%)",
        report.attributed_j,
        report.measured_j,
        report.share_of(report.attributed_j) * 100.0
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<8} {:>12} {:>10} {:>12} {:>10}  command",
        "pid", "energy J", "± J", "in calls J", "share"
    )?;
    for p in &report.processes {
        let shown = |x: f64| as_in_json(x, 6).unwrap_or(0.0);
        let energy = shown(p.energy_j);
        // The pid is not padded to its header's width, and never was (it used to be printed
        // from a JSON value, whose Display ignores widths); kept so the output stays the same.
        writeln!(
            out,
            "{} {:>12.3} {:>10.3} {:>12.3} {:>9.1}%  {}",
            p.pid,
            energy,
            shown(p.uncertainty_j),
            shown(p.spans_energy_j),
            report.share_of(energy) * 100.0,
            p.cmdline
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<24} {:<10} {:>10} {:>12} {:>10} {:>8}",
        "span", "class", "calls", "energy J", "± J", "share"
    )?;
    for op in report.spans.iter().take(top) {
        writeln!(
            out,
            "{:<24} {:<10} {:>10} {:>12.4} {:>10.4} {:>7.2}%{}",
            op.name,
            op.class,
            op.calls,
            op.energy_j,
            op.uncertainty_j,
            report.share_of(op.energy_j) * 100.0,
            shapes_cell(op)
        )?;
    }
    writeln!(out)?;
    writeln!(out, "{:<24} {:>12} {:>10} {:>8}", "class", "energy J", "± J", "share")?;
    for c in &report.classes {
        writeln!(
            out,
            "{:<24} {:>12.4} {:>10.4} {:>7.2}%",
            c.class,
            c.energy_j,
            c.uncertainty_j,
            report.share_of(c.energy_j) * 100.0
        )?;
    }
    // ITT tasks (phases, op ranges) enclose the calls made inside them, and each span's energy
    // counts in its own class: said only when that makes the shares add up past the whole.
    let classes_share: f64 = report.classes.iter().map(|c| report.share_of(c.energy_j)).sum();
    if classes_share > 1.005 {
        writeln!(
            out,
            "(spans nest: a call inside an ITT task counts in the task's class too, so the class \
             shares add up to {:.0}%)",
            classes_share * 100.0
        )?;
    }
    Ok(())
}

/// The devices' table: each device's energy, the run's total, and the capture ranges' energy.
fn write_devices(report: &EnergyReport, out: &mut dyn Write) -> io::Result<()> {
    let duration_s = report.duration_s();
    writeln!(
        out,
        "{:<28} {:<17} {:>12} {:>10} {:>10}  uuid",
        "device", "source", "energy J", "± J", "mean W"
    )?;
    for d in &report.devices {
        let name = format!("{}{}", d.name, if d.in_run { "" } else { " (not in run)" });
        let figure = |x: Option<f64>, json_digits: i32, shown: usize| {
            x.and_then(|x| as_in_json(x, json_digits)).map_or_else(|| "-".into(), |x| format!("{x:.shown$}"))
        };
        writeln!(
            out,
            "{:<28} {:<17} {:>12} {:>10} {:>10}  {}",
            name,
            d.source,
            figure(d.energy_j, 6, 3),
            figure(d.uncertainty_j, 6, 3),
            figure(d.mean_power_w, 4, 2),
            d.uuid
        )?;
        for e in &d.errors {
            writeln!(out, "    error: {e}")?;
        }
    }
    writeln!(
        out,
        "{:<28} {:<17} {:>12.3} {:>10.3} {:>10.2}",
        "run total",
        "",
        report.measured_j,
        report.measured_uncertainty_j,
        report.measured_j / duration_s.max(1e-9)
    )?;
    if let Some(ranges) = &report.ranges {
        writeln!(
            out,
            "{:<28} {:<17} {:>12.3} {:>10.3} {:>10.2}  {} range(s) ({}), {:.3} s of {:.3} s",
            "in the capture ranges",
            "",
            ranges.energy_j,
            ranges.uncertainty_j,
            ranges.energy_j / ranges.time_s.max(1e-9),
            ranges.ranges.len(),
            ranges.source,
            ranges.time_s,
            duration_s
        )?;
    }
    Ok(())
}

/// The operator table (`--ops`): per span name, calls, median and trimmed mean time, energy
/// per call, share.
pub fn write_ops(report: &EnergyReport, out: &mut dyn Write) -> io::Result<()> {
    // The shapes column only for runs recorded with --torch-shapes: other tables stay as they were.
    let with_shapes = report.spans.iter().any(|op| !op.shapes.shapes.is_empty());
    writeln!(
        out,
        "{:<24} {:>10} {:>12} {:>12} {:>14} {:>12} {:>8}{}",
        "op",
        "calls",
        "median ms",
        "mean ms",
        "J per call",
        "± J",
        "share",
        if with_shapes { "  shapes (dtypes)" } else { "" }
    )?;
    for op in &report.spans {
        let calls = op.calls.max(1) as f64;
        writeln!(
            out,
            "{:<24} {:>10} {:>12.4} {:>12.4} {:>14.6} {:>12.6} {:>7.2}%{}",
            op.name,
            op.calls,
            op.median_s * 1e3,
            op.mean_s * 1e3,
            op.energy_j / calls,
            op.uncertainty_j / calls,
            report.share_of(op.energy_j) * 100.0,
            shapes_cell(op)
        )?;
    }
    if let Some(g) = &report.gpu_side {
        let sum = g.ops_j + g.idle_j + g.outside_j;
        writeln!(
            out,
            "GPU energy from the GPU timeline (each op's kernels, not its host span): ops {:.3} J, idle {:.3} ± {:.3} J, \
             outside any op {:.3} J; together {:.3} J of the GPUs' measured {:.3} J",
            g.ops_j, g.idle_j, g.idle_uncertainty_j, g.outside_j, sum, g.measured_j
        )?;
        if g.unmatched_work > 0 {
            writeln!(
                out,
                "({} GPU activities ran on a CUDA device no measured GPU was matched with)",
                g.unmatched_work
            )?;
        }
    }
    Ok(())
}

/// `  [32,3,56,56];[64,3,3,3] (float32;float32)` after a row of an op with shapes, else nothing.
fn shapes_cell(op: &SpanEnergy) -> String {
    if op.shapes.shapes.is_empty() {
        String::new()
    } else {
        format!("  {} ({})", op.shapes.shapes, op.shapes.dtypes)
    }
}

#[cfg(test)]
mod tests {
    use super::super::attribution::{ClassEnergy, EnergyReport};

    fn report(classes: &[(&str, f64)]) -> EnergyReport {
        EnergyReport {
            command_line: "train".into(),
            start_ns: 0,
            end_ns: 1_000_000_000,
            devices: Vec::new(),
            measured_j: 100.0,
            measured_uncertainty_j: 1.0,
            attributed_j: 60.0,
            layers: Default::default(),
            spans: Vec::new(),
            classes: classes
                .iter()
                .map(|&(class, energy_j)| ClassEnergy { class: class.into(), energy_j, uncertainty_j: 0.0 })
                .collect(),
            processes: Vec::new(),
            notes: Vec::new(),
            gpu_side: None,
            ranges: None,
        }
    }

    fn text(report: &EnergyReport) -> String {
        let mut out = Vec::new();
        super::write(report, 10, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn nested_class_shares_past_the_whole_are_explained() {
        let nested = text(&report(&[("itt:mlprof.phase", 70.0), ("read", 40.0)]));
        assert!(nested.contains("class shares add up to 110%"), "{nested}");
        let flat = text(&report(&[("read", 40.0), ("write", 20.0)]));
        assert!(!flat.contains("spans nest"), "{flat}");
    }
}
