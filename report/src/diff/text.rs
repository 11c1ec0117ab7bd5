//! `mlprof diff` as text: the runs, their data-pipeline wait shares and energy side by side,
//! the ranks' wall-time breakdowns, then per function, span name and file the top rows by
//! absolute time change.

use std::io::{self, Write};

use super::{Diff, Row, RunSide};
use crate::activity::Category;
use crate::human::{format_bytes, format_ns, truncate};

/// Writes the comparison; `top` rows per table.
pub fn write(diff: &Diff, top: usize, out: &mut dyn Write) -> io::Result<()> {
    let describe = |s: &RunSide| {
        format!(
            "{} — {}, {:.3} s, {} events, {} dropped",
            s.run,
            truncate(&s.command, 80),
            s.duration_ns as f64 / 1e9,
            s.events,
            s.dropped
        )
    };
    writeln!(out, "mlprof diff: A = {}", describe(&diff.a))?;
    writeln!(out, "             B = {}", describe(&diff.b))?;
    writeln!(out)?;
    let pipeline = |s: &RunSide| match s.pipeline {
        Some(p) => format!(
            "{:.1}% ({} of {}, {} batches)",
            p.wait_share * 100.0,
            format_ns(p.wait_total_ns),
            format_ns(p.wall_ns),
            p.batches
        ),
        None => "no DataLoader spans".into(),
    };
    writeln!(out, "Data wait share: A {}  →  B {}", pipeline(&diff.a), pipeline(&diff.b))?;
    let energy = |s: &RunSide| match &s.energy {
        Some(e) => format!(
            "{:.3} ± {:.3} J ({:.2} W mean)",
            e.energy_j,
            e.uncertainty_j,
            e.energy_j / e.duration_s.max(1e-9)
        ),
        None => "not measured".into(),
    };
    writeln!(out, "Energy:          A {}  →  B {}", energy(&diff.a), energy(&diff.b))?;
    if !diff.ranks.is_empty() {
        writeln!(out)?;
        writeln!(out, "Main processes (ranks), wall time A → B:")?;
        for r in &diff.ranks {
            let who = |m: &Option<crate::activity::MainActivity>| {
                m.as_ref().map_or("-".to_string(), |m| format!("{} {}", m.label(), format_ns(m.wall_ns)))
            };
            writeln!(out, "  {:<6} {}  →  {}", r.row.name, who(&r.a), who(&r.b))?;
            let mut parts: Vec<String> = Category::ALL
                .iter()
                .map(|&c| {
                    let of = |m: &Option<crate::activity::MainActivity>| {
                        m.as_ref().map_or(0, |m| m.by_category[c as usize])
                    };
                    format!("{} {} → {}", c.label(), format_ns(of(&r.a)), format_ns(of(&r.b)))
                })
                .collect();
            let rest = |m: &Option<crate::activity::MainActivity>| m.as_ref().map_or(0, |m| m.rest_ns());
            parts.push(format!("rest {} → {}", format_ns(rest(&r.a)), format_ns(rest(&r.b))));
            writeln!(out, "         {}", parts.join(", "))?;
        }
    }
    table("Calls", "function", &diff.calls, true, top, out)?;
    table("Spans (ops, phases, DataLoader, transforms)", "name", &diff.spans, false, top, out)?;
    table("Files", "path", &diff.files, true, top, out)?;
    if !diff.sites.is_empty() {
        table("Call sites (--sites)", "site", &diff.sites, true, top, out)?;
    }
    Ok(())
}

fn signed_ns(delta: i128) -> String {
    let magnitude = format_ns(delta.unsigned_abs().min(u64::MAX as u128) as u64);
    match delta.signum() {
        1 => format!("+{magnitude}"),
        -1 => format!("-{magnitude}"),
        _ => "0".into(),
    }
}

fn table(
    title: &str,
    what: &str,
    rows: &[Row],
    bytes: bool,
    top: usize,
    out: &mut dyn Write,
) -> io::Result<()> {
    writeln!(out)?;
    let changed = rows.iter().filter(|r| r.changed()).count();
    writeln!(out, "{title}: {} in A or B, {changed} changed; top {top} by |Δ time|:", rows.len())?;
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  {:>10} {:>10} {:>9} {:>10} {:>10} {:>11} {:>7}{}  {what}",
        "count A",
        "count B",
        "Δ count",
        "time A",
        "time B",
        "Δ time",
        "B/A",
        if bytes { format!(" {:>10} {:>10}", "bytes A", "bytes B") } else { String::new() }
    )?;
    for r in rows.iter().take(top) {
        let delta_count = r.delta_count();
        writeln!(
            out,
            "  {:>10} {:>10} {:>9} {:>10} {:>10} {:>11} {:>7}{}  {}",
            r.a.count,
            r.b.count,
            if delta_count > 0 { format!("+{delta_count}") } else { delta_count.to_string() },
            format_ns(r.a.total_ns),
            format_ns(r.b.total_ns),
            signed_ns(r.delta_ns()),
            r.ratio().map_or("-".into(), |x| format!("{x:.2}×")),
            if bytes {
                format!(" {:>10} {:>10}", format_bytes(r.a.bytes), format_bytes(r.b.bytes))
            } else {
                String::new()
            },
            truncate(&r.name, 100)
        )?;
    }
    Ok(())
}
