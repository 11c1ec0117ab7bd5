//! `mlprof summary --sites`: the calls of each call site (`mlprof-collect --sites`): which
//! Python line made how many of which calls, for how long and how many bytes.

use std::collections::BTreeMap;

use mlprof_format::func::Func;
use mlprof_format::record::Event;
use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;

use super::CallStats;
use crate::run::RunMeta;

/// One call site and its calls.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SiteRow {
    /// The path as the code object names it (a native caller: its module).
    pub(crate) file: String,
    pub(crate) line: u32,
    pub(crate) function: String,
    pub(crate) native: bool,
    /// Function name → its calls from here.
    pub(crate) calls: BTreeMap<&'static str, CallStats>,
    #[serde(skip)]
    pub(crate) total: CallStats,
}

/// The calls of an events frame waiting for the sites frame after it, and the sites' tallies.
#[derive(Default)]
pub(super) struct SiteTally {
    /// (function id, stats) of each event of the last events frame (only while the run has
    /// sites).
    pending: Vec<(u16, CallStats)>,
    by_site: HashMap<(u32, u16), CallStats>,
}

impl SiteTally {
    /// A new events frame: its calls wait for their sites.
    pub(super) fn events(&mut self, meta: &RunMeta, events: &[Event]) {
        self.pending.clear();
        if meta.sites.is_empty() {
            return;
        }
        self.pending.extend(events.iter().map(|event| {
            let stats = Func::from_id(event.kind).map_or_else(CallStats::default, |func| CallStats {
                count: 1,
                errors: event.is_error() as u64,
                total_ns: event.dur,
                bytes: crate::run::bytes_moved(func, event),
            });
            (event.kind, stats)
        }));
    }

    /// The sites of the last events frame's calls.
    pub(super) fn sites(&mut self, sites: &[u32]) {
        for (&(kind, stats), &site) in self.pending.iter().zip(sites) {
            if site != 0 && stats.count > 0 {
                self.by_site.entry((site, kind)).or_default().add(&stats);
            }
        }
        self.pending.clear();
    }

    /// The sites, most total time first.
    pub(super) fn finish(self, meta: &RunMeta) -> Vec<SiteRow> {
        let mut rows: HashMap<u32, SiteRow> = HashMap::default();
        for ((site, kind), stats) in self.by_site {
            let (Some(info), Some(func)) = (meta.sites.get(&site), Func::from_id(kind)) else { continue };
            let row = rows.entry(site).or_insert_with(|| SiteRow {
                file: meta.string(info.file),
                line: info.line,
                function: if info.function == 0 { String::new() } else { meta.string(info.function) },
                native: info.native,
                calls: BTreeMap::new(),
                total: CallStats::default(),
            });
            row.calls.entry(func.name()).or_default().add(&stats);
            row.total.add(&stats);
        }
        let mut rows: Vec<SiteRow> = rows.into_values().collect();
        rows.sort_by(|a, b| {
            b.total.total_ns.cmp(&a.total.total_ns).then((&a.file, a.line).cmp(&(&b.file, b.line)))
        });
        rows
    }
}

/// `mlprof summary --sites`: the top `top` sites by time, each with its mix of calls
/// (`folder.py:42 make_dataset — 39,132 stat, 2.1 s`).
pub fn write(summary: &super::Summary, top: usize, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    use crate::human::{format_bytes, format_ns};
    let sites = &summary.sites;
    if sites.is_empty() {
        writeln!(
            out,
            "No call sites in this run (record with `mlprof-collect --sites`; calls made while no Python \
             ran on their thread have none)."
        )?;
        return Ok(());
    }
    let total: u64 = sites.iter().map(|s| s.total.total_ns).sum();
    writeln!(out, "Top call sites by time ({} sites, {} in their calls):", sites.len(), format_ns(total))?;
    for site in sites.iter().take(top) {
        let mut mix: Vec<(&&str, &CallStats)> = site.calls.iter().collect();
        mix.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        let mix: Vec<String> =
            mix.iter().map(|(name, stats)| format!("{} {name}", group(stats.count))).collect();
        let bytes = if site.total.bytes > 0 {
            format!(", {}", format_bytes(site.total.bytes))
        } else {
            String::new()
        };
        let errors = if site.total.errors > 0 {
            format!(", {} failed", group(site.total.errors))
        } else {
            String::new()
        };
        let place = if site.native { site.file.clone() } else { format!("{}:{}", site.file, site.line) };
        writeln!(
            out,
            "  {place} {} — {}, {}{bytes}{errors}",
            site.function,
            mix.join(", "),
            format_ns(site.total.total_ns)
        )?;
    }
    if sites.len() > top {
        writeln!(out, "  … {} more (--top N)", sites.len() - top)?;
    }
    Ok(())
}

/// `n` with thousands separated by commas.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
