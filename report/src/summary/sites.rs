//! `mlprof summary --sites`: the calls of each call site (`mlprof-collect --sites`): which
//! Python line made how many of which calls, for how long and how many bytes.

use std::collections::BTreeMap;

use mlprof_format::func::{Api, Func};
use mlprof_format::record::{Event, IttSpan};
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
    /// ITT spans (ops under `--torch`) that ended here, by name: apart from the calls, which
    /// they may enclose.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) spans: BTreeMap<String, SpanStats>,
    /// The lines that called this one's function, innermost first (`--sites=N`: N − 1 of them
    /// at most); a site of the same line called from elsewhere is another row.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) callers: Vec<Caller>,
}

impl SiteRow {
    /// All its calls together.
    pub(crate) fn total(&self) -> CallStats {
        let mut total = CallStats::default();
        self.calls.values().for_each(|stats| total.add(stats));
        total
    }
}

/// A line that called a site's function.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Caller {
    pub(crate) file: String,
    pub(crate) line: u32,
    pub(crate) function: String,
}

/// The callers of `info`'s site, innermost first, by following parents (at most 16: a chain is
/// no longer than the frames recorded).
fn callers(meta: &RunMeta, info: &mlprof_format::site::SiteInfo) -> Vec<Caller> {
    let mut out = Vec::new();
    let mut parent = info.parent;
    while parent != 0 && out.len() < 16 {
        let Some(up) = meta.sites.get(&parent) else { break };
        out.push(Caller { file: meta.string(up.file), line: up.line, function: name_of(meta, up.function) });
        parent = up.parent;
    }
    out
}

fn name_of(meta: &RunMeta, id: u64) -> String {
    if id == 0 { String::new() } else { meta.string(id) }
}

/// The spans of one name at one site.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct SpanStats {
    pub(crate) count: u64,
    pub(crate) total_ns: u64,
}

/// A site that made calls on one file.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FileSite {
    pub(crate) file: String,
    pub(crate) line: u32,
    pub(crate) function: String,
    /// A native caller (`file` is its module).
    pub(crate) native: bool,
    pub(crate) calls: u64,
    pub(crate) total_ns: u64,
}

/// The calls of an events frame waiting for the sites frame after it, and the sites' tallies.
#[derive(Default)]
pub(super) struct SiteTally {
    /// Each event of the events frame being read, in order (only while the run has sites).
    pending: Vec<Noted>,
    by_site: HashMap<(u32, u16), CallStats>,
    /// Per (site, span name's string id): the ITT spans that ended there.
    spans_by_site: HashMap<(u32, u64), SpanStats>,
    /// Per (file's path id, site): the calls on that file made there.
    by_file: HashMap<(u64, u32), CallStats>,
    /// Calls and spans of a run with sites that have none (see [`SiteTally::without_site`]).
    without_site: u64,
}

/// An event of the frame being read, as the site tally needs it.
enum Noted {
    /// A call of function `kind` on file `path` (0: none).
    Call { kind: u16, stats: CallStats, path: u64 },
    /// An ITT span named `name`, `dur` long.
    Span { name: u64, dur: u64 },
    /// A record of a function this build does not know.
    Unknown,
}

/// Sites named per file in the file table.
pub(crate) const SITES_PER_FILE: usize = 3;

impl SiteTally {
    /// A new events frame begins: the calls noted for the last one had no sites frame (none of
    /// them had a site).
    pub(super) fn events_frame(&mut self) {
        self.without_site += self.pending.iter().filter(|n| !matches!(n, Noted::Unknown)).count() as u64;
        self.pending.clear();
    }

    /// Calls and spans without a site in a run with sites: no Python line and no native caller
    /// found (a frame being torn down, a full site table or lane, a trapped system call).
    pub(super) fn without_site(&mut self) -> u64 {
        self.events_frame();
        self.without_site
    }

    /// One event of the frame being read (in order), of function `func` (`None`: unknown), on
    /// file `path` (0: none).
    #[inline]
    pub(super) fn note(
        &mut self,
        meta: &RunMeta,
        event: &Event,
        func: Option<Func>,
        stats: &CallStats,
        path: u64,
    ) {
        if meta.sites.is_empty() {
            return;
        }
        self.pending.push(match func {
            None => Noted::Unknown,
            Some(func) if func.api() == Api::Itt => {
                Noted::Span { name: IttSpan::from_event(event).name, dur: event.dur }
            }
            Some(_) => Noted::Call { kind: event.kind, stats: *stats, path },
        });
    }

    /// The sites of the events frame just read (native callers of one function folded into
    /// one site, as the stream does).
    pub(super) fn sites(&mut self, meta: &RunMeta, sites: &[u32]) {
        for (noted, &site) in self.pending.iter().zip(sites) {
            if site == 0 {
                self.without_site += u64::from(!matches!(noted, Noted::Unknown));
                continue;
            }
            let site = meta.standing_site(site);
            match *noted {
                Noted::Span { name, dur } => {
                    let spans = self.spans_by_site.entry((site, name)).or_default();
                    spans.count += 1;
                    spans.total_ns += dur;
                }
                Noted::Call { kind, stats, path } => {
                    self.by_site.entry((site, kind)).or_default().add(&stats);
                    if path != 0 {
                        self.by_file.entry((path, site)).or_default().add(&stats);
                    }
                }
                Noted::Unknown => {}
            }
        }
        self.pending.clear();
    }

    /// The top sites of each file (by path id), most time first.
    pub(super) fn file_sites(&self, meta: &RunMeta) -> HashMap<u64, Vec<FileSite>> {
        let mut out: HashMap<u64, Vec<FileSite>> = HashMap::default();
        for (&(path, site), stats) in &self.by_file {
            let Some(info) = meta.sites.get(&site) else { continue };
            out.entry(path).or_default().push(FileSite {
                file: meta.string(info.file),
                line: info.line,
                function: name_of(meta, info.function),
                native: info.native,
                calls: stats.count,
                total_ns: stats.total_ns,
            });
        }
        for sites in out.values_mut() {
            sites.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then((&a.file, a.line).cmp(&(&b.file, b.line))));
            sites.truncate(SITES_PER_FILE);
        }
        out
    }

    /// The sites, most total time first.
    pub(super) fn finish(&mut self, meta: &RunMeta) -> Vec<SiteRow> {
        let mut rows: HashMap<u32, SiteRow> = HashMap::default();
        for ((site, kind), stats) in std::mem::take(&mut self.by_site) {
            let (Some(info), Some(func)) = (meta.sites.get(&site), Func::from_id(kind)) else { continue };
            row_of(&mut rows, meta, site, info).calls.entry(func.name()).or_default().add(&stats);
        }
        for ((site, name), stats) in std::mem::take(&mut self.spans_by_site) {
            let Some(info) = meta.sites.get(&site) else { continue };
            let name = if name == 0 { "(unnamed)".to_string() } else { meta.string(name) };
            let spans = row_of(&mut rows, meta, site, info).spans.entry(name).or_default();
            spans.count += stats.count;
            spans.total_ns += stats.total_ns;
        }
        let mut rows: Vec<(u64, SiteRow)> =
            rows.into_values().map(|row| (row.total().total_ns, row)).collect();
        rows.sort_by(|(a_ns, a), (b_ns, b)| b_ns.cmp(a_ns).then((&a.file, a.line).cmp(&(&b.file, b.line))));
        rows.into_iter().map(|(_, row)| row).collect()
    }
}

/// The row of `site`, made on first use.
fn row_of<'r>(
    rows: &'r mut HashMap<u32, SiteRow>,
    meta: &RunMeta,
    site: u32,
    info: &mlprof_format::site::SiteInfo,
) -> &'r mut SiteRow {
    rows.entry(site).or_insert_with(|| SiteRow {
        file: meta.string(info.file),
        line: info.line,
        function: name_of(meta, info.function),
        native: info.native,
        calls: BTreeMap::new(),
        spans: BTreeMap::new(),
        callers: callers(meta, info),
    })
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
    let total: u64 = sites.iter().map(|s| s.total().total_ns).sum();
    if summary.sites_missing > 0 {
        writeln!(
            out,
            "{} calls and spans have no site (no Python line and no native caller found: a frame \
             being torn down, a full site table, a trapped system call).",
            group(summary.sites_missing)
        )?;
    }
    writeln!(out, "Top call sites by time ({} sites, {} in their calls):", sites.len(), format_ns(total))?;
    for site in sites.iter().take(top) {
        let total = site.total();
        let mut mix: Vec<(&&str, &CallStats)> = site.calls.iter().collect();
        mix.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        let mix: Vec<String> =
            mix.iter().map(|(name, stats)| format!("{} {name}", group(stats.count))).collect();
        let bytes = if total.bytes > 0 { format!(", {}", format_bytes(total.bytes)) } else { String::new() };
        let errors =
            if total.errors > 0 { format!(", {} failed", group(total.errors)) } else { String::new() };
        let place = if site.native { site.file.clone() } else { format!("{}:{}", site.file, site.line) };
        let mut spans: Vec<(&String, &SpanStats)> = site.spans.iter().collect();
        spans.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        let spans: Vec<String> =
            spans.iter().take(4).map(|(name, s)| format!("{} {name}", group(s.count))).collect();
        let spans = if spans.is_empty() { String::new() } else { format!("; spans: {}", spans.join(", ")) };
        let called_from: String =
            site.callers.iter().map(|c| format!("\n      ← {}:{} {}", c.file, c.line, c.function)).collect();
        writeln!(
            out,
            "  {place} {} — {}, {}{bytes}{errors}{spans}{called_from}",
            site.function,
            mix.join(", "),
            format_ns(total.total_ns)
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
