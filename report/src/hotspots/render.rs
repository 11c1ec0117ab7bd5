//! `mlprof hotspots` as text, JSON (`--json`) and folded stacks (`--folded`, for inferno and
//! speedscope).

use serde_json::{Value, json};

use super::Hotspots;

/// `--json`: `{"hz", "samples", "lost", "refused", "spans": [{"span", "samples", "cpu_ns",
/// "functions": [{"function", "module", "self", "total"}]}]}` (`self`, `total`: samples).
pub fn json(hotspots: &Hotspots) -> Value {
    let spans: Vec<Value> = hotspots
        .spans
        .iter()
        .map(|span| {
            let functions: Vec<Value> = span
                .functions
                .iter()
                .map(|f| json!({"function": f.function, "module": f.module, "self": f.self_samples, "total": f.total_samples}))
                .collect();
            json!({"span": span.span, "samples": span.samples, "cpu_ns": cpu_ns(hotspots, span.samples), "functions": functions})
        })
        .collect();
    json!({
        "hz": hotspots.hz,
        "samples": hotspots.samples,
        "lost": hotspots.lost,
        "refused": hotspots.refused,
        "spans": spans,
    })
}

/// The CPU time `samples` stand for: each is 1/hz s of a thread on a CPU.
fn cpu_ns(hotspots: &Hotspots, samples: u64) -> u64 {
    if hotspots.hz == 0 { 0 } else { samples.saturating_mul(1_000_000_000) / u64::from(hotspots.hz) }
}

/// `--folded`: one line per distinct stack of a span, `span;root;…;leaf samples`.
pub fn folded(hotspots: &Hotspots, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    for (span, path, count) in &hotspots.folded {
        writeln!(out, "{span};{} {count}", path.join(";"))?;
    }
    Ok(())
}

/// The text report: per span, its samples and CPU time, and its top functions by self and
/// total share.
pub fn text(hotspots: &Hotspots, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    use crate::human::format_ns;
    if !hotspots.refused.is_empty() {
        writeln!(out, "No samples: {}", hotspots.refused)?;
        return Ok(());
    }
    if hotspots.samples == 0 && hotspots.spans.is_empty() {
        writeln!(out, "No samples in this run (record with `mlprof-collect --sample`).")?;
        return Ok(());
    }
    writeln!(
        out,
        "{} samples at {} Hz ({} of CPU), {} lost",
        hotspots.samples,
        hotspots.hz,
        format_ns(cpu_ns(hotspots, hotspots.samples)),
        hotspots.lost
    )?;
    for span in &hotspots.spans {
        writeln!(
            out,
            "\n{} — {} samples, {} of CPU",
            span.span,
            span.samples,
            format_ns(cpu_ns(hotspots, span.samples))
        )?;
        writeln!(out, "  {:>6} {:>6}  function (module)", "self", "total")?;
        for f in &span.functions {
            let share = |n: u64| 100.0 * n as f64 / span.samples.max(1) as f64;
            // A Python frame's name has its file in it already (`forward (transforms.py:981)`).
            let file = f.module.rsplit('/').next().unwrap_or_default();
            let named = !file.is_empty() && f.function.contains(&format!("({file}"));
            let module =
                if f.module.is_empty() || named { String::new() } else { format!(" ({})", f.module) };
            writeln!(
                out,
                "  {:>5.1}% {:>5.1}%  {}{module}",
                share(f.self_samples),
                share(f.total_samples),
                f.function
            )?;
        }
    }
    Ok(())
}
