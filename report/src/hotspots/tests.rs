//! Hotspots of a made-up run: samples whose stacks are functions of this test binary, taken
//! inside and outside two nested spans.

use super::*;
use crate::testing::TempRun;
use mlprof_format::func::Func;
use mlprof_format::record::IttSpan;
use mlprof_format::runfile::{RunEnd, RunInfo, RunWriter};
use mlprof_format::sample::{CpuSample, ModuleInfo, SamplingInfo, StackFrame, StackInfo};
use mlprof_format::string_id;

#[inline(never)]
fn leaf_function() -> u64 {
    std::hint::black_box(7)
}

#[inline(never)]
fn caller_function() -> u64 {
    leaf_function() + 1
}

/// The offset in this test binary's file of the code at `address`.
fn file_offset(address: u64) -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (start, end) = fields[0].split_once('-').unwrap();
        let (start, end) = (u64::from_str_radix(start, 16).unwrap(), u64::from_str_radix(end, 16).unwrap());
        if (start..end).contains(&address) {
            return address - start + u64::from_str_radix(fields[2], 16).unwrap();
        }
    }
    panic!("no mapping holds {address:#x}");
}

fn span(name: u64, start: u64, dur: u64) -> mlprof_format::record::Event {
    IttSpan { kind: Func::IttTask as u16, pid: 10, tid: 10, start, dur, name, ..IttSpan::default() }
        .into_event()
}

/// A batch fetch (100..200) holds a transform (120..140). Stack 1 is `leaf_function` called by
/// `caller_function`, stack 2 `caller_function` alone (leaf). Samples at 110, 130, 135, 150
/// and 250: the transform has two (stack 1), the fetch those two and two more (stacks 1 and 2),
/// one is outside.
#[test]
fn samples_go_to_their_innermost_span_and_frames_are_named() {
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let leaf = file_offset(leaf_function as *const () as u64) + 1;
    // A return address inside the caller (after its call: +1 past its start is inside it).
    let caller = file_offset(caller_function as *const () as u64) + 2;
    let path = std::env::temp_dir().join(format!("mlprof-hotspots-{}.bin", std::process::id()));
    let run = TempRun::new(path.clone());
    let mut w = RunWriter::create(&path, &RunInfo::default()).unwrap();
    let (fetch, crop) = (b"batch.fetch".as_slice(), b"transform:RandomResizedCrop".as_slice());
    w.write_string(string_id(fetch), fetch).unwrap();
    w.write_string(string_id(crop), crop).unwrap();
    w.write_module(&ModuleInfo { id: 1, path: exe.display().to_string(), build_id: Vec::new() }).unwrap();
    let frame = |offset| StackFrame { module: 1, offset };
    w.write_stack(&StackInfo { id: 1, frames: vec![frame(leaf), frame(caller)], truncated: false }).unwrap();
    w.write_stack(&StackInfo { id: 2, frames: vec![frame(caller)], truncated: false }).unwrap();
    let sample = |time_ns, stack| CpuSample { time_ns, pid: 10, tid: 10, stack };
    w.write_samples(&[sample(110, 1), sample(130, 1), sample(135, 1), sample(150, 2), sample(250, 1)])
        .unwrap();
    // The inner span ends first, and is written first.
    w.write_events(&[span(string_id(crop), 120, 20), span(string_id(fetch), 100, 100)]).unwrap();
    w.write_sampling(&SamplingInfo {
        hz: 100,
        samples: 5,
        lost: 0,
        refused: String::new(),
        stack_bytes: 8192,
    })
    .unwrap();
    w.finish(&RunEnd::default()).unwrap();

    let hotspots = compute(run.path(), &Options { span: None, top: 10 }).unwrap();
    let spans: Vec<(&str, u64)> = hotspots.spans.iter().map(|s| (s.span.as_str(), s.samples)).collect();
    assert_eq!(spans, [("batch.fetch", 4), ("transform:RandomResizedCrop", 2), (OUTSIDE, 1)]);
    let crop = &hotspots.spans[1];
    let names: Vec<(String, u64, u64)> =
        crop.functions.iter().map(|f| (f.function.clone(), f.self_samples, f.total_samples)).collect();
    assert!(names[0].0.ends_with("leaf_function") && names[0].1 == 2 && names[0].2 == 2, "{names:?}");
    assert!(names[1].0.ends_with("caller_function") && names[1].1 == 0 && names[1].2 == 2, "{names:?}");
    let fetch = &hotspots.spans[0];
    let caller_share = fetch.functions.iter().find(|f| f.function.ends_with("caller_function")).unwrap();
    assert_eq!((caller_share.self_samples, caller_share.total_samples), (1, 4));
    // Folded: root first, one line per (span, stack).
    let folded: Vec<String> =
        hotspots.folded.iter().map(|(span, path, n)| format!("{span};{} {n}", path.join(";"))).collect();
    assert!(
        folded
            .iter()
            .any(|l| l.starts_with("transform:RandomResizedCrop;") && l.ends_with("leaf_function 2")),
        "{folded:?}"
    );
    // Only one span, and JSON in the shape.
    let only =
        compute(run.path(), &Options { span: Some("transform:RandomResizedCrop".into()), top: 1 }).unwrap();
    assert_eq!(only.spans.len(), 1);
    let json = render::json(&only);
    assert_eq!(json["hz"], 100);
    assert_eq!(json["spans"][0]["functions"][0]["self"], 2);
    assert_eq!(json["spans"][0]["cpu_ns"], 20_000_000);
    assert!(caller_function() == 8);
}
