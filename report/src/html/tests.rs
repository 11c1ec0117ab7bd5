//! The page of a small synthetic run: sections, exact numbers, no external reference.

use super::tables::compact_list;
use super::*;
use crate::testing;

#[test]
fn a_page_with_every_section_and_exact_numbers() {
    let run = testing::write("html");
    let figures = RunFigures::load(run.path()).unwrap();
    let page = render(&figures, None);
    assert!(page.starts_with("<!DOCTYPE html>\n<html lang=\"en\">") && page.ends_with("</html>\n"));
    for id in [
        "summary",
        "breakdown",
        "timelines",
        "pipeline",
        "files",
        "ops",
        "calls",
        "gpu",
        "gpu-timeline",
        "energy",
        "end",
    ] {
        assert!(page.contains(&format!("id=\"{id}\"")), "section {id}");
    }
    assert!(!page.contains("id=\"comparison\""));
    // Self-contained: nothing to fetch.
    for needle in ["http://", "https://", "src=", "<script", "@import", "url("] {
        assert!(!page.contains(needle), "{needle}");
    }
    assert!(page.contains(r#"<dd data-k="events" data-v="13">13</dd>"#));
    assert!(page.contains(r#"<dd data-k="duration_ns" data-v="20000">0.000 s</dd>"#));
    assert!(page.contains(
        r#"<tr data-name="read"><td class="name">read</td><td class="num" data-k="count" data-v="2">2</td>"#
    ));
    assert!(page.contains(r#"<td class="num" data-k="bytes_read" data-v="4196">4.1 KiB</td>"#));
    // The trainer (pid 10) is the main process; the forked worker's calls count for it.
    assert!(page.contains(r#"<tr data-name="pid 10"><td class="name">pid 10</td><td class="num" data-k="wall_ns" data-v="12000">"#));
    assert!(page.contains("No DataLoader spans"));
    // Balanced markup: every section closes.
    assert_eq!(page.matches("<section").count(), page.matches("</section>").count());
    assert_eq!(page.matches("<svg").count(), page.matches("</svg>").count());
}

#[test]
fn a_baseline_adds_the_comparison() {
    let run = testing::write("html-baseline");
    let figures = RunFigures::load(run.path()).unwrap();
    let again = RunFigures::load(run.path()).unwrap();
    let page = render(&figures, Some(&again));
    assert!(page.contains("id=\"comparison\""));
    assert!(page.contains("A: pid 10") && page.contains("B: pid 10"));
    assert!(page.contains("No change."));
}

#[test]
fn repeated_shapes_are_shown_once() {
    assert_eq!(compact_list("[3,16,16];[3,16,16];[8,3,16,16]"), "[3,16,16] ×2; [8,3,16,16]");
    assert_eq!(compact_list("float32;int64;float32"), "float32; int64; float32");
    assert_eq!(compact_list(""), "");
}
