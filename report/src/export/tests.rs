//! The export's tables read back: what each kind of record becomes, and an fd change
//! recorded late.

use super::*;
use mlprof_format::func::Func;
use mlprof_format::record::{GpuCall, IttSpan};

/// Every file under `dir`, hidden ones too, sorted (none if `dir` does not exist).
pub(super) fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Rows of every Parquet file under `dir` (sorted by path), each as its fields' text.
pub(super) fn rows(dir: &Path) -> Vec<Vec<String>> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let mut out = Vec::new();
    for file in files_under(dir) {
        let reader = SerializedFileReader::new(std::fs::File::open(&file).unwrap()).unwrap();
        for row in reader.get_row_iter(None).unwrap() {
            out.push(row.unwrap().get_column_iter().map(|(_, f)| f.to_string()).collect());
        }
    }
    out
}

/// GPU calls (kernel names, from the run's symbols or the handle, and null for calls that
/// launch nothing), ITT spans and energy samples (null readings) read back as written.
#[test]
fn gpu_calls_spans_and_energy_read_back() {
    use mlprof_format::energy::{EnergyDevice, EnergySample};
    use mlprof_format::record::Event;
    use mlprof_format::runfile::{ProcessInfo, RunEnd, RunInfo, RunWriter, SymbolInfo};

    let dir = std::env::temp_dir().join(format!("mlprof-export-gpu-{}", std::process::id()));
    let run = dir.join("run.bin");
    std::fs::create_dir_all(&dir).unwrap();
    let start = 1_000_000_000u64;
    let info = RunInfo { host: "h".into(), start_mono_ns: start, ..Default::default() };
    let mut w = RunWriter::create(&run, &info).unwrap();
    let (kernel, task, domain) = (1u64, 2u64, 3u64);
    w.write_string(kernel, b"_Z6kernelv").unwrap();
    w.write_string(task, b"forward").unwrap();
    w.write_string(domain, b"torch").unwrap();
    w.write_process(&ProcessInfo { pid: 7, ppid: 1, start_ns: start, ..Default::default() }).unwrap();
    w.write_symbol(&SymbolInfo { pid: 7, handle: 0xabc, name: kernel }).unwrap();
    let gpu = |func: Func, at: u64, object: u64| {
        GpuCall {
            kind: func as u16,
            pid: 7,
            tid: 7,
            start: start + at,
            dur: 10,
            object,
            ..Default::default()
        }
        .into_event()
    };
    let span = IttSpan {
        kind: Func::IttTask as u16,
        pid: 7,
        tid: 7,
        start: start + 5,
        dur: 100,
        id: 9,
        name: task,
        domain,
        ..Default::default()
    }
    .into_event();
    let read =
        Event { kind: Func::Read as u16, pid: 7, tid: 7, fd: -1, start: start + 50, ..Default::default() };
    w.write_events(&[
        gpu(Func::CudaLaunchKernel, 10, 0xabc),
        gpu(Func::CudaMemcpy, 20, 0),
        gpu(Func::CudaLaunchKernel, 30, 0xdef),
        span,
        read,
    ])
    .unwrap();
    // GPU work handed over before the link of the call that issued it (the collector drained
    // CUPTI's lane first), and work no recorded call issued.
    use mlprof_format::gpu::{ACTIVITY_KERNEL, ACTIVITY_LINK, GpuActivity, KIND_GPU_ACTIVITY};
    let activity = |what, correlation, value| GpuActivity {
        kind: KIND_GPU_ACTIVITY,
        what,
        pid: 7,
        correlation,
        start: start + 40,
        dur: 3,
        value,
        ..Default::default()
    };
    w.write_gpu_activity(&[activity(ACTIVITY_KERNEL, 5, kernel), activity(ACTIVITY_KERNEL, 6, kernel)])
        .unwrap();
    w.write_gpu_activity(&[activity(ACTIVITY_LINK, 5, 7)]).unwrap();
    w.write_energy_device(&EnergyDevice {
        id: 0,
        kind: "gpu".into(),
        name: "GPU 0".into(),
        in_run: true,
        ..Default::default()
    })
    .unwrap();
    w.write_energy_samples(&[
        EnergySample {
            device: 0,
            time_ns: start + 1,
            energy_uj: Some(5),
            power_mw: Some(70),
            ..Default::default()
        },
        EnergySample { device: 0, time_ns: start + 2, energy_uj: None, power_mw: None, ..Default::default() },
    ])
    .unwrap();
    w.finish(&RunEnd { end_ns: start + 1000, events: 5, dropped: 0 }).unwrap();

    let out = dir.join("parquet");
    let mut progress = Vec::new();
    let exported = export_parquet(&run, &out, &mut |p| progress.push((p.events, p.total))).unwrap();
    // After each batch: here one, of the 5 events the end record counts.
    assert_eq!(progress, [(5, Some(5))]);
    let table = |name: &str| rows(&table_dir(&out, name, &exported.run_id));
    let gpu_rows = table("gpu_calls");
    let kernels: Vec<&str> = gpu_rows.iter().map(|r| r[11].as_str()).collect();
    assert_eq!(kernels, ["\"kernel()\"", "null", "\"kernel@0xdef\""]);
    assert_eq!(gpu_rows[1][0], "\"cudaMemcpy\"");
    let activity = table("gpu_activity");
    let linked: Vec<(&str, &str)> = activity.iter().map(|r| (r[8].as_str(), r[9].as_str())).collect();
    assert_eq!(linked.len(), 2, "{activity:?}");
    assert!(linked.contains(&("5", "7")) && linked.contains(&("6", "null")), "{activity:?}");
    assert!(exported.rows.contains(&("gpu_activity", 2)), "{:?}", exported.rows);
    let spans = table("spans");
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0][..3], ["\"forward\"", "\"torch\"", "\"task\""]);
    let energy = table("energy");
    assert_eq!(energy.len(), 2);
    assert_eq!(
        (energy[0][1].as_str(), energy[0][5].as_str(), energy[0][6].as_str()),
        ("\"GPU 0\"", "5", "70")
    );
    assert_eq!((energy[1][5].as_str(), energy[1][6].as_str()), ("null", "null"));
    let events = table("events");
    assert_eq!((events.len(), events[0][9].as_str()), (1, "null"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A read recorded a batch before the open of its fd: read ahead, the open is known in
/// time; not, the export starts over with the complete fd history, leaving no file of its
/// first pass. Either way the read names the file.
#[test]
fn an_open_recorded_after_its_reads_names_them_all_the_same() {
    use crate::testing::{self, DATASET};

    let run = testing::write_late_open("export-late-open");
    let dir = std::env::temp_dir().join(format!("mlprof-export-late-open-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for lookahead in [LOOKAHEAD_EVENTS, 0] {
        let out = dir.join(format!("parquet-{lookahead}"));
        let exported = export_looking_ahead(run.path(), &out, lookahead, &mut |_| {}).unwrap();
        assert_eq!(exported.second_pass.is_some(), lookahead == 0, "{:?}", exported.second_pass);
        let events = rows(&table_dir(&out, "events", &exported.run_id));
        let path = format!("{DATASET:?}");
        assert_eq!(events.len(), 2);
        assert!(events.iter().all(|r| r[9] == path), "lookahead {lookahead}: {events:?}");
        let files = rows(&table_dir(&out, "files", &exported.run_id));
        assert_eq!(files, [[path, "1".into(), "2".into(), "7".into(), "0".into(), "1100".into()]]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn utc_stamps() {
    assert_eq!(utc_stamp(0), "19700101T000000");
    assert_eq!(utc_stamp(1_764_151_353 * 1_000_000_000), "20251126T100233");
    assert_eq!(utc_stamp(951_782_400 * 1_000_000_000), "20000229T000000");
}
