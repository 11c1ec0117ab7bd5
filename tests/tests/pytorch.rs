//! examples/train.py (PyTorch DataLoader with 2 worker processes) under the
//! launcher: the workers read the image files, the main process writes the
//! checkpoint.
//!
//! Needs torch + torchvision in the test Python.  Without them the test
//! fails, unless MLPROF_SKIP_TORCH=1, in which case it is skipped (said and counted).

use mlprof_tests::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const READS: &[&str] = &["read", "pread", "pread64", "readv", "preadv", "fread"];

fn image_files(root: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for class in std::fs::read_dir(root).unwrap() {
        let class = class.unwrap().path();
        if !class.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&class).unwrap() {
            let f = f.unwrap().path();
            let ext = f.extension().and_then(|e| e.to_str()).unwrap_or("");
            if ext == "png" || ext == "jpg" {
                out.insert(f.display().to_string(), std::fs::metadata(&f).unwrap().len());
            }
        }
    }
    out
}

#[test]
fn pytorch_dataloader_workers() {
    if !require_torch() {
        return;
    }
    let limit = default_timeout().max(Duration::from_secs(600));
    let dir = TempDir::new("pytorch");
    let py = python().display().to_string();
    let train = workspace_root().join("examples/train.py").display().to_string();
    let data = dir.file("data");
    let ckpt = dir.file("ckpt.pt");

    // Create the data set first, unprofiled, so that under the profiler only
    // the DataLoader workers touch the image files.
    let mut c = Command::new(&py);
    clean_env(&mut c).args([&train, "--data", &data, "--generate-only"]);
    let o = output_with_timeout(c, limit);
    assert!(o.status.success(), "generating the data set failed\n{}", describe(&o));
    let images = image_files(Path::new(&data));
    assert_eq!(images.len(), 64, "train.py should generate 64 images");

    let out = dir.join("run.bin");
    let cmd = [py.as_str(), &train, "--data", &data, "--out", &ckpt, "--workers", "2", "--epochs", "1"];
    let o = run_collect_env(&out, &[], &cmd, &[], limit);
    assert!(o.status.success(), "train.py under mlprof-collect failed\n{}", describe(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("checkpoint"), "train.py output\n{}", describe(&o));
    let ckpt_len = std::fs::metadata(&ckpt).map(|m| m.len()).unwrap_or(0);
    assert!(ckpt_len > 0, "checkpoint {ckpt} not written");

    let s = clean_summary(&out);
    let mut e = s.expect();

    // The main process: runs train.py and its parent is not a train.py process.
    let train_procs = s.procs_with_cmdline("train.py");
    let train_pids: BTreeSet<u64> = train_procs.iter().map(|p| p.pid()).collect();
    let mains: Vec<_> = train_procs.iter().filter(|p| !train_pids.contains(&p.ppid())).collect();
    assert_eq!(
        mains.len(),
        1,
        "want one main train.py process; train.py processes: {:?}",
        train_procs.iter().map(|p| p.describe()).collect::<Vec<_>>()
    );
    let main = *mains[0];
    // DataLoader workers: forked children of main still running train.py
    // (children that exec'd something else are not workers).
    let workers: Vec<_> = train_procs
        .iter()
        .filter(|p| p.ppid() == main.pid() && s.procs_with_pid(p.pid()).len() == 1)
        .collect();
    assert_eq!(
        workers.len(),
        2,
        "want 2 DataLoader worker processes (ppid {}); processes: {:?}",
        main.pid(),
        s.processes().iter().map(|p| p.describe()).collect::<Vec<_>>()
    );

    // Every image is read, at least its full size, per the summary.
    for (path, len) in &images {
        match s.file_opt(path) {
            None => e.that(format_args!("no file entry for image {path}"), false),
            Some(f) => e.that(format_args!("image {path}: opens {} >= 1", f.opens()), f.opens() >= 1).that(
                format_args!("image {path}: bytes_read {} >= size {len}", f.bytes_read()),
                f.bytes_read() >= *len,
            ),
        };
    }
    // The checkpoint written by torch.save.
    match s.file_opt(&ckpt) {
        None => e.that(format_args!("no file entry for the checkpoint {ckpt}"), false),
        Some(f) => e.that(
            format_args!("checkpoint bytes_written {} > 0 (file is {ckpt_len} bytes)", f.bytes_written()),
            f.bytes_written() > 0,
        ),
    };
    for w in &workers {
        e.that(
            format_args!("worker {} reads files (calls.read.count {})", w.pid(), w.calls().count("read")),
            READS.iter().map(|f| w.calls().count(f)).sum::<u64>() > 0,
        );
    }
    e.finish();

    // Which process read which image: from the trace's per-call events.
    let trace = convert_trace(&out);
    let events = trace.get("traceEvents").and_then(Value::as_array).expect("traceEvents array");
    let mut read_by: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for ev in events {
        if ev.get("ph").and_then(Value::as_str) != Some("X") {
            continue;
        }
        let name = ev.get("name").and_then(Value::as_str).unwrap_or("");
        if !READS.contains(&name) {
            continue;
        }
        let Some(path) = ev.get("args").and_then(|a| a.get("path")).and_then(Value::as_str) else {
            continue;
        };
        if images.contains_key(path) {
            let pid = ev.get("pid").and_then(Value::as_u64).unwrap_or(0);
            read_by.entry(pid).or_default().insert(path.to_string());
        }
    }
    let mut all = BTreeSet::new();
    for w in &workers {
        let got = read_by.get(&w.pid()).cloned().unwrap_or_default();
        assert!(
            !got.is_empty(),
            "worker {} ({:?}) has no image reads in the trace; readers: {:?}",
            w.pid(),
            w.cmdline(),
            read_by.iter().map(|(p, s)| (*p, s.len())).collect::<Vec<_>>()
        );
        all.extend(got);
    }
    let missing: Vec<_> = images.keys().filter(|p| !all.contains(*p)).collect();
    assert!(missing.is_empty(), "images not read by any worker: {missing:?}");
}
