//! The report's flame graphs (`--sample`): for the spans with most samples, the sampled stacks
//! as an icicle (root on top, callees below, each box as wide as its samples), drawn with the
//! same hand-written SVG as the other plots ([`super::svg`]): tooltips are `<title>`s, and boxes
//! narrower than a pixel are left out, so a graph's size is bounded whatever the run.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::svg::{WIDTH, escape};
use crate::hotspots::{Folded, OUTSIDE};

/// Rows drawn at most (deeper frames are cut).
const MAX_DEPTH: usize = 64;
const ROW: f64 = 17.0;
/// Characters that fit a pixel width at the page's small font.
const PX_PER_CHAR: f64 = 6.5;

/// One frame of the merged stacks: its samples and its callees by name.
#[derive(Default)]
struct Node {
    samples: u64,
    children: BTreeMap<String, Node>,
}

impl Node {
    fn add(&mut self, path: &[String], count: u64) {
        self.samples += count;
        if let Some((first, rest)) = path.split_first() {
            self.children.entry(first.clone()).or_default().add(rest, count);
        }
    }

    fn depth(&self) -> usize {
        1 + self.children.values().map(Node::depth).max().unwrap_or(0)
    }
}

/// The spans to draw: the `top` with most samples (outside any span only when nothing else).
pub(super) fn top_spans(folded: &[Folded], top: usize) -> Vec<(String, u64)> {
    let mut samples: BTreeMap<&str, u64> = BTreeMap::new();
    for (span, _, count) in folded {
        *samples.entry(span).or_default() += count;
    }
    let mut spans: Vec<(String, u64)> = samples.into_iter().map(|(s, n)| (s.to_string(), n)).collect();
    if spans.iter().any(|(s, _)| s != OUTSIDE) {
        spans.retain(|(s, _)| s != OUTSIDE);
    }
    spans.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    spans.truncate(top);
    spans
}

/// The icicle of `span`'s stacks in `folded`.
pub(super) fn icicle(folded: &[Folded], span: &str) -> String {
    let mut root = Node::default();
    for (_, path, count) in folded.iter().filter(|(s, ..)| s == span) {
        root.add(path, *count);
    }
    let depth = root.depth().min(MAX_DEPTH);
    let height = depth as f64 * ROW;
    let mut out = format!(
        r#"<svg class="plot flame" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="flame graph of {}">"#,
        escape(span)
    );
    draw(&mut out, span, &root, root.samples, (0.0, WIDTH), 0);
    out.push_str("</svg>");
    out
}

/// Draws `node` (named `name`) across `[x, x + width)` at row `row`, then its callees below.
fn draw(out: &mut String, name: &str, node: &Node, total: u64, (x, width): (f64, f64), row: usize) {
    if row >= MAX_DEPTH || width < 1.0 {
        return;
    }
    let y = row as f64 * ROW;
    let share = node.samples as f64 * 100.0 / total.max(1) as f64;
    let label = fit(name, width);
    let _ = write!(
        out,
        r#"<g><title>{} — {} samples ({share:.1}%)</title><rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"#,
        escape(name),
        node.samples,
        (width - 0.5).max(0.5),
        ROW - 1.0,
        color(name)
    );
    if !label.is_empty() {
        let _ = write!(out, r#"<text x="{:.1}" y="{:.1}">{}</text>"#, x + 3.0, y + ROW - 5.0, escape(&label));
    }
    out.push_str("</g>");
    let mut at = x;
    for (child_name, child) in &node.children {
        let child_width = width * child.samples as f64 / node.samples.max(1) as f64;
        draw(out, child_name, child, total, (at, child_width), row + 1);
        at += child_width;
    }
}

/// `name` cut to what fits `width` pixels (empty when not even a few characters fit).
fn fit(name: &str, width: f64) -> String {
    let fits = ((width - 6.0) / PX_PER_CHAR).floor() as usize;
    if fits < 4 {
        return String::new();
    }
    let count = name.chars().count();
    if count <= fits {
        name.to_string()
    } else {
        format!("{}…", name.chars().take(fits - 1).collect::<String>())
    }
}

/// A warm colour from the name (the same function, the same colour, in every graph).
fn color(name: &str) -> String {
    let hash = name.bytes().fold(2_166_136_261u32, |h, b| (h ^ u32::from(b)).wrapping_mul(16_777_619));
    let (r, g, b) = (205 + hash % 50, 80 + (hash >> 8) % 130, 40 + (hash >> 16) % 50);
    format!("rgb({r},{g},{b})")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(span: &str, path: &[&str], n: u64) -> Folded {
        (span.to_string(), path.iter().map(|s| s.to_string()).collect(), n)
    }

    /// main → a (3 samples) and main → b → c (1): main spans the width, a three quarters of
    /// it, c under b; the outside span is left out while a named one exists.
    #[test]
    fn an_icicle_is_as_wide_as_the_samples() {
        let folded = vec![
            stack("op", &["main", "a"], 3),
            stack("op", &["main", "b", "c"], 1),
            stack(OUTSIDE, &["main"], 9),
        ];
        assert_eq!(top_spans(&folded, 3), [("op".to_string(), 4)]);
        let svg = icicle(&folded, "op");
        assert!(svg.contains("<title>op — 4 samples (100.0%)</title>"), "{svg}");
        assert!(svg.contains("<title>a — 3 samples (75.0%)</title>"), "{svg}");
        assert!(
            svg.contains(r#"<title>c — 1 samples (25.0%)</title><rect x="720.0" y="51.0" width="239.5""#),
            "{svg}"
        );
    }
}
