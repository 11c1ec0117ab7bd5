//! Beyond one machine: ranks of a torchrun job, two "nodes" with disagreeing clocks merged on
//! one time axis, the Parquet export read by DuckDB and PySpark, and a synthetic 64-rank job
//! on four nodes merged and exported.
//!
//! Needs torch (torchrun), duckdb and pyspark in the test Python (scripts/python-env.sh), Java
//! for Spark, root for `unshare --time` and libfaketime (`faketime` package) for the two-node
//! test; each missing piece is a visible skip.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use mlprof_format::rank::RankInfo;
use mlprof_format::record::{Event, IttSpan};
use mlprof_format::runfile::{ProcessExit, ProcessInfo, RunEnd, RunInfo, RunWriter, ThreadInfo};
use mlprof_format::{func::Func, string_id};
use mlprof_tests::*;
use serde_json::Value;

fn limit() -> Duration {
    default_timeout().max(Duration::from_secs(600))
}

fn mlprof(args: &[&str]) -> std::process::Output {
    let mut c = Command::new(&bins().mlprof);
    clean_env(&mut c).args(args);
    let o = output_with_timeout(c, limit());
    assert!(o.status.success(), "mlprof {args:?} failed\n{}", describe(&o));
    o
}

fn torchrun() -> PathBuf {
    python().with_file_name("torchrun")
}

/// A free TCP port for torchrun's rendezvous.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(29555)
}

fn summary_text(run: &Path) -> String {
    String::from_utf8_lossy(&mlprof(&["summary", &run.display().to_string()]).stdout).into_owned()
}

/// The processes of a summary with a rank: rank → (pid, role, world_size, local_rank, exit).
fn ranked(summary: &Value) -> BTreeMap<u64, Vec<Value>> {
    let mut out: BTreeMap<u64, Vec<Value>> = BTreeMap::new();
    for p in summary["processes"].as_array().unwrap() {
        if let Some(rank) = p["rank"].as_u64() {
            out.entry(rank).or_default().push(p.clone());
        }
    }
    out
}

/// The export of `runs` into `dir`, read by `engine` (`duckdb` or `spark`); per run id.
fn query(engine: &str, dir: &Path) -> Value {
    let mut c = Command::new(python());
    clean_env(&mut c).arg(script("query_export.py")).arg(engine).arg(dir);
    let o = output_with_timeout(c, limit());
    assert!(o.status.success(), "query_export.py {engine} failed\n{}", describe(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text.lines().rfind(|l| l.starts_with('{')).unwrap_or("{}");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON from query_export.py ({e}): {text}"))
}

/// Exports `run` into `dir`; returns the run id from the command's line.
fn export(dir: &Path, run: &Path) -> String {
    let o = mlprof(&["export", "--parquet", &dir.display().to_string(), &run.display().to_string()]);
    let err = String::from_utf8_lossy(&o.stderr);
    let id = err.split("/run=").nth(1).and_then(|rest| rest.split('/').next());
    id.unwrap_or_else(|| panic!("no run id in the export's line: {err}")).to_string()
}

/// What an engine read for one run equals what `mlprof summary --json` says of it: calls per
/// function name (the aggregated clock reads, which are counters and not events, aside), ITT
/// tasks and frames per (domain, name), and each process image's rank and exit code.
fn assert_export_matches(engine: &str, read: &Value, summary: &Value, what: &str) {
    let calls = read["calls"].as_object().cloned().unwrap_or_default();
    for (name, stats) in summary["calls"].as_object().unwrap() {
        let want = stats["count"].as_u64().unwrap();
        let got = calls.get(name).and_then(Value::as_u64).unwrap_or(0);
        if got == 0 && matches!(name.as_str(), "clock_gettime" | "gettimeofday") {
            continue;
        }
        assert_eq!(got, want, "{engine}, {what}: {name} rows vs summary count");
    }
    for name in calls.keys() {
        assert!(summary["calls"].get(name).is_some(), "{engine}, {what}: {name} is not in the summary");
    }
    let spans = read["spans"].as_object().cloned().unwrap_or_default();
    let mut want_spans = 0;
    for s in summary["spans"].as_array().unwrap() {
        let key = format!("{}\t{}", s["domain"].as_str().unwrap(), s["name"].as_str().unwrap());
        let got = spans.get(&key).and_then(Value::as_u64).unwrap_or(0);
        assert_eq!(got, s["count"].as_u64().unwrap(), "{engine}, {what}: span {key}");
        want_spans += 1;
    }
    assert_eq!(spans.len(), want_spans, "{engine}, {what}: span names");
    let mut got: Vec<(u64, u64, Option<u64>, Option<i64>)> = read["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["pid"].as_u64().unwrap(),
                p["exec_index"].as_u64().unwrap(),
                p["rank"].as_u64(),
                p["exit_code"].as_i64(),
            )
        })
        .collect();
    let mut want: Vec<(u64, u64, Option<u64>, Option<i64>)> = summary["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["pid"].as_u64().unwrap(),
                p["exec_index"].as_u64().unwrap(),
                p["rank"].as_u64(),
                p["exit_code"].as_i64(),
            )
        })
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{engine}, {what}: processes (pid, exec, rank, exit)");
}

/// The columns issue 12 names for each table (a contract: more may follow, none may go), as
/// DuckDB reads them with Hive partitioning (`run` and `rank` come from the paths).
fn assert_contract_columns(read: &Value) {
    let contract: &[(&str, &[&str])] = &[
        (
            "events",
            &[
                "name", "pid", "tid", "rank", "start_ns", "dur_ns", "fd", "bytes", "ret", "errno", "path",
                "run",
            ],
        ),
        ("spans", &["name", "domain", "pid", "tid", "rank", "start_ns", "dur_ns", "depth", "id", "run"]),
        ("processes", &["pid", "ppid", "rank", "host", "cmdline", "exit_code", "signal", "run"]),
        ("files", &["path", "run"]),
    ];
    for (table, want) in contract {
        let have: Vec<&str> = read["columns"][table]
            .as_array()
            .unwrap_or_else(|| panic!("no {table} table read: {}", read["columns"]))
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        for column in *want {
            assert!(have.contains(column), "{table} lacks {column}: {have:?}");
        }
    }
}

#[test]
fn torchrun_two_ranks_under_one_collector() {
    if !require_torch() || !require_python_modules(&["duckdb"]) {
        return;
    }
    let dir = TempDir::new("ranks");
    let out = dir.join("run.bin");
    let port = free_port().to_string();
    let master = format!("--master_port={port}");
    let cmd = [
        torchrun().display().to_string(),
        "--nproc_per_node=2".into(),
        "--master_addr=127.0.0.1".into(),
        master,
        script("ddp_gloo.py").display().to_string(),
        "--steps".into(),
        "6".into(),
        "--slow-rank".into(),
        "1".into(),
        "--workers".into(),
        "1".into(),
    ];
    let o = run_collect_env(&out, &["--torch"], &cmd, &[], limit());
    assert!(o.status.success(), "torchrun under mlprof-collect failed\n{}", describe(&o));
    let summary = summary_json(&out);
    let ranks = ranked(&summary);
    assert_eq!(ranks.keys().copied().collect::<Vec<_>>(), vec![0, 1], "ranks\n{summary}");
    for (rank, processes) in &ranks {
        let main: Vec<&Value> = processes.iter().filter(|p| p["rank_role"] == "main").collect();
        assert_eq!(main.len(), 1, "rank {rank}: one main process\n{processes:?}");
        let p = main[0];
        assert_eq!(p["world_size"], 2, "rank {rank}");
        assert_eq!(p["local_rank"].as_u64(), Some(*rank), "rank {rank}");
        assert_eq!(p["rank_source"], "RANK", "rank {rank}");
        assert!(p["cmdline"].as_str().unwrap().contains("ddp_gloo.py"), "rank {rank}: {p}");
        // Its one DataLoader worker (forked, so it inherited the rank's environment) is marked
        // as the rank's child, pointing at the rank's process.
        let children: Vec<&Value> = processes.iter().filter(|p| p["rank_role"] == "child").collect();
        assert_eq!(children.len(), 1, "rank {rank}: one DataLoader worker\n{processes:?}");
        assert_eq!(children[0]["ppid"], p["pid"], "rank {rank}: {}", children[0]);
        assert_eq!(children[0]["rank_main_pid"], p["pid"], "rank {rank}: {}", children[0]);
        assert_eq!(processes.len(), 2, "rank {rank}: its process and its worker\n{processes:?}");
    }
    // torchrun itself has no rank.
    let unranked: Vec<&Value> =
        summary["processes"].as_array().unwrap().iter().filter(|p| p["rank"].is_null()).collect();
    assert!(unranked.iter().all(|p| p["rank_role"].is_null() && p["local_rank"].is_null()), "{unranked:?}");
    assert!(unranked.iter().any(|p| p["cmdline"].as_str().unwrap().contains("torchrun")), "{unranked:?}");
    // Every process's exit was seen: torchrun's and both ranks' (they return from main).
    for p in summary["processes"].as_array().unwrap() {
        assert_eq!(p["exit_code"], 0, "exit of {p}");
    }
    let table = &summary["ranks"];
    assert_eq!(table["ranks"].as_array().unwrap().len(), 2, "{table}");
    let rows = table["ranks"].as_array().unwrap();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["rank"], i, "{row}");
        assert_eq!(row["steps"], 6, "{row}");
        assert_eq!(row["processes"], 2, "{row}");
        // Six explicit all_reduces and DDP's gradient all_reduce per step at least.
        assert!(row["collectives"].as_u64().unwrap() >= 12, "{row}");
        assert!(row["data_wait_ns"].as_u64().unwrap() > 0, "waits for the worker's batches: {row}");
    }
    // Both ranks make the same sequence of blocking collectives.
    assert_eq!(rows[0]["collectives"], rows[1]["collectives"], "{table}");
    // Rank 1 sleeps 20 ms before each step's work.
    let slow = table["stragglers"].as_array().unwrap().iter().filter(|s| s["slowest_rank"] == 1).count();
    assert!(slow * 2 > table["stragglers"].as_array().unwrap().len(), "stragglers: {table}");
    let text = summary_text(&out);
    assert!(text.contains("Per rank (its process and its workers):"), "{text}");
    assert!(text.contains("Straggler: rank 1 was the slowest"), "{text}");
    assert!(!text.contains("exit not seen"), "{text}");

    // The export, as DuckDB reads it, counts what the summary counts.
    let pq = dir.join("parquet");
    let id = export(&pq, &out);
    let read = query("duckdb", &pq);
    assert_contract_columns(&read);
    assert_export_matches("duckdb", &read[&id], &summary, "torchrun run");
    // Each rank's events partition holds the events of that rank's processes and of no other.
    let event_ranks = read[&id]["event_ranks"].as_object().unwrap();
    for (rank, processes) in &ranks {
        let pids: Vec<u64> =
            event_ranks[&rank.to_string()].as_array().unwrap().iter().map(|p| p.as_u64().unwrap()).collect();
        let mut want: Vec<u64> = processes.iter().map(|p| p["pid"].as_u64().unwrap()).collect();
        want.sort();
        want.dedup();
        assert!(pids.iter().all(|p| want.contains(p)), "rank {rank} partition holds {pids:?}, want {want:?}");
        let main = processes.iter().find(|p| p["rank_role"] == "main").unwrap();
        assert!(pids.contains(&main["pid"].as_u64().unwrap()), "rank {rank}: {pids:?}");
    }
    // And as PySpark reads it.
    if !require_python_modules(&["pyspark"]) || !require_program("java", "for PySpark") {
        return;
    }
    let read = query("spark", &pq);
    assert_export_matches("spark", &read[&id], &summary, "torchrun run");
}

/// libfaketime's library, from the `faketime` package.
fn libfaketime() -> Option<PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

/// Whether this machine lets us make a time namespace.
fn time_namespaces_work() -> Result<(), String> {
    let mut c = Command::new("unshare");
    clean_env(&mut c).args(["--time", "--fork", "--monotonic", "1000", "true"]);
    match try_output_with_timeout(c, Duration::from_secs(30)) {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "`unshare --time` is not permitted here: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run unshare: {e}")),
    }
}

const SHIFT_S: u64 = 500_000;

#[test]
fn two_nodes_with_disagreeing_clocks_merge_on_one_axis() {
    if !require_torch() || !require_python_modules(&["duckdb"]) || !require_root("for `unshare --time`") {
        return;
    }
    if let Err(why) = time_namespaces_work() {
        skip(why);
        return;
    }
    let Some(faketime) = libfaketime() else {
        skip(
            "libfaketime is not installed (apt-get install faketime; scripts/system-deps.sh does it as root)",
        );
        return;
    };
    let dir = TempDir::new("nodes");
    let port = free_port().to_string();
    let node = |rank: &str| {
        vec![
            torchrun().display().to_string(),
            "--nnodes=2".into(),
            format!("--node_rank={rank}"),
            "--nproc_per_node=1".into(),
            "--master_addr=127.0.0.1".into(),
            format!("--master_port={port}"),
            script("ddp_gloo.py").display().to_string(),
            "--steps".into(),
            "8".into(),
        ]
    };
    // Node 0: as it is. Node 1: CLOCK_MONOTONIC SHIFT_S ahead (its own boot time), and its
    // collector's wall clock 2.5 s fast (its profiled processes keep the true one: libfaketime
    // breaks Python's sleeps).
    let out0 = dir.join("node-%n.bin");
    let mut c0 = collect_command(&out0, &["--torch", "--quiet"], &node("0"));
    c0.stdout(Stdio::piped()).stderr(Stdio::piped());
    let first = c0.spawn().expect("start node 0's collector");
    let mut c1 = Command::new("unshare");
    clean_env(&mut c1)
        .args(["--time", "--fork", "--monotonic", &SHIFT_S.to_string(), "--"])
        .arg("env")
        .arg("FAKETIME=+2.5s")
        .arg("DONT_FAKE_MONOTONIC=1")
        .arg(format!("LD_PRELOAD={}", faketime.display()))
        .arg(&bins().collect)
        .arg("--out")
        .arg(dir.join("node-%n.bin"))
        .args(["--torch", "--quiet", "--"])
        .arg("env")
        .arg(format!("LD_PRELOAD={}", bins().preload.display()))
        .args(node("1"));
    let second = output_with_timeout(c1, limit());
    let first = first.wait_with_output().expect("node 0's collector");
    assert!(first.status.success(), "node 0 failed\n{}", describe(&first));
    assert!(second.status.success(), "node 1 failed\n{}", describe(&second));
    // `%n` took torchrun's --node_rank.
    let (run0, run1) = (dir.join("node-0.bin"), dir.join("node-1.bin"));
    assert!(run0.is_file() && run1.is_file(), "node files in {}", dir.str());

    let job = dir.join("job.bin");
    let o = mlprof(&[
        "merge",
        &run0.display().to_string(),
        &run1.display().to_string(),
        "-o",
        &job.display().to_string(),
    ]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.contains("node 1") && said.contains("collectives matched with node 0"), "{said}");
    let summary = summary_json(&job);
    let nodes = summary["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{summary}");
    assert_eq!(nodes[0]["alignment"], "reference");
    assert_eq!(nodes[1]["alignment"], "collectives", "{:?}", nodes[1]);
    let offset = nodes[1]["offset_ns"].as_i64().unwrap();
    let realtime_guess = nodes[1]["realtime_offset_ns"].as_i64().unwrap();
    let want = -(SHIFT_S as i64) * 1_000_000_000;
    // Both nodes are this machine: the true offset is the namespace's shift exactly.
    assert!((offset - want).abs() < 5_000_000, "offset {offset} vs {want}");
    assert!(
        (realtime_guess - want).abs() > 2_000_000_000,
        "the realtime guess alone is seconds off: {realtime_guess}"
    );
    let ranks = ranked(&summary);
    assert_eq!(ranks.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
    let nodes_of: Vec<u64> = [0, 1].iter().map(|r| ranks[r][0]["node"].as_u64().unwrap()).collect();
    assert_eq!(nodes_of, vec![0, 1], "rank r ran on node r");

    // On the merged axis, the n-th all_reduce of rank 0 and of rank 1 end together.
    let trace = convert_trace(&job);
    let ends = |pid: u64| -> Vec<f64> {
        let mut ends: Vec<(f64, f64)> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X" && e["name"] == "gloo:all_reduce" && e["pid"].as_u64() == Some(pid))
            .map(|e| (e["ts"].as_f64().unwrap(), e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap()))
            .collect();
        ends.sort_by(|a, b| a.partial_cmp(b).unwrap());
        ends.into_iter().map(|(_, end)| end).collect()
    };
    let (a, b) = (ends(ranks[&0][0]["pid"].as_u64().unwrap()), ends(ranks[&1][0]["pid"].as_u64().unwrap()));
    // Per step, DDP's gradient all_reduce (one bucket for this model) and the script's own.
    assert_eq!((a.len(), b.len()), (16, 16), "all_reduce ranges of ranks 0 and 1");
    // A rank's gloo thread can be descheduled between the collective's end and its record of
    // it (this machine is shared), so single pairs may lag by milliseconds; most do not.
    let mut diffs: Vec<f64> = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).collect();
    diffs.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let (median, p80) = (diffs[(diffs.len() - 1) / 2], diffs[(diffs.len() - 1) * 4 / 5]);
    assert!(median < 1_000.0 && p80 < 3_000.0, "matching all_reduce ends differ (µs, sorted): {diffs:?}");
    let text = summary_text(&job);
    assert!(text.contains("Nodes (merged run") && text.contains("residual skew"), "{text}");

    // The merged run through DuckDB.
    let pq = dir.join("parquet");
    let id = export(&pq, &job);
    let read = query("duckdb", &pq);
    assert_export_matches("duckdb", &read[&id], &summary, "merged run");
    // energy and convert accept it too.
    mlprof(&["energy", "--json", &job.display().to_string()]);
}

/// A node of a synthetic job: `ranks` rank processes (pids the same on every node), each
/// opening and reading a file and ending a `gloo:all_reduce` at the same true instant as every
/// other rank (± 20 µs) every 5 ms, then an `optimizer.step`. Node i's clock is 1000·i s ahead
/// of node 0's and its realtime anchor (700·(i−1)) ms off.
fn synth_node(path: &Path, node: u32, nodes: u32, ranks: u32, steps: u64) {
    const S: u64 = 1_000_000_000;
    let ahead = node as u64 * 1000 * S;
    let start = 1000 * S + ahead;
    let info = RunInfo {
        host: format!("synth{node}"),
        session: "default".into(),
        command: vec!["python".into(), "train.py".into()],
        start_mono_ns: start,
        start_realtime_ns: (1_700_000_000 * S).saturating_add_signed((node as i64 - 1) * 700_000_000),
        clock_source: "synthetic".into(),
        ..Default::default()
    };
    let mut w = RunWriter::create(path, &info).unwrap();
    let names = ["PyTorch", "gloo:all_reduce", "mlprof.phase", "optimizer.step", "/data/shard"];
    for n in names {
        w.write_string(string_id(n.as_bytes()), n.as_bytes()).unwrap();
    }
    let [pytorch, all_reduce, phase, step, shard] = names.map(|n| string_id(n.as_bytes()));
    for r in 0..ranks {
        let pid = 1000 + r;
        let rank = RankInfo {
            rank: node * ranks + r,
            local_rank: Some(r),
            world_size: Some(nodes * ranks),
            local_world_size: Some(ranks),
            node_rank: Some(node),
            source: "RANK".into(),
        };
        w.write_process(&ProcessInfo {
            pid,
            ppid: 1,
            argv: info.command.clone(),
            start_ns: start + 1000,
            rank: Some(rank),
            ..Default::default()
        })
        .unwrap();
        w.write_thread(&ThreadInfo { pid, tid: pid, name: "python".into() }).unwrap();
    }
    let mut events = Vec::new();
    for k in 0..steps {
        let end = start + 100_000_000 + k * 5_000_000;
        for r in 0..ranks {
            let pid = 1000 + r;
            let at = end - 3_000_000;
            let call = |kind: Func, start: u64, dur: u64, fd: i32| Event {
                kind: kind as u16,
                pid,
                tid: pid,
                fd,
                start,
                dur,
                ..Default::default()
            };
            let mut open = call(Func::Open64, at, 10_000, 7);
            (open.ret, open.arg2) = (7, shard);
            let mut read = call(Func::Read, at + 20_000, 50_000, 7);
            (read.arg, read.arg2, read.ret) = (4096, 4096, 4096);
            events.extend([open, read, call(Func::Close, at + 80_000, 5_000, 7)]);
            let jitter = (k * 7 + r as u64 * 13) % 20 * 1000;
            let span = |name, domain, start, dur| {
                IttSpan {
                    kind: Func::IttTask as u16,
                    pid,
                    tid: pid,
                    start,
                    dur,
                    name,
                    domain,
                    ..Default::default()
                }
                .into_event()
            };
            events.push(span(all_reduce, pytorch, end + jitter - 1_000_000, 1_000_000));
            events.push(span(step, phase, end + jitter + 10_000, 100_000));
        }
    }
    events.sort_by_key(|e| e.start + e.dur);
    w.write_events(&events).unwrap();
    let end_ns = start + 200_000_000 + steps * 5_000_000;
    for r in 0..ranks {
        w.write_process_exit(&ProcessExit {
            pid: 1000 + r,
            time_ns: end_ns,
            exit_code: Some(0),
            signal: None,
        })
        .unwrap();
    }
    w.finish(&RunEnd { end_ns, events: events.len() as u64, dropped: 0 }).unwrap();
}

#[test]
fn synthetic_64_ranks_on_4_nodes_merge_and_export() {
    let dir = TempDir::new("synth64");
    let inputs: Vec<String> = (0..4)
        .map(|node| {
            let path = dir.join(format!("node{node}.bin"));
            synth_node(&path, node, 4, 16, 200);
            path.display().to_string()
        })
        .collect();
    let job = dir.join("job.bin");
    let mut args: Vec<&str> = vec!["merge"];
    args.extend(inputs.iter().map(String::as_str));
    let job_arg = job.display().to_string();
    args.extend(["-o", &job_arg]);
    mlprof(&args);
    let summary = summary_json(&job);
    let nodes = summary["nodes"].as_array().unwrap();
    for (i, n) in nodes.iter().enumerate() {
        let want = -(i as i64) * 1_000_000_000_000;
        let got = n["offset_ns"].as_i64().unwrap();
        assert!((got - want).abs() <= 20_000, "node {i}: offset {got}, want {want}");
        if i > 0 {
            assert_eq!(n["alignment"], "collectives");
            assert_eq!(n["matched"], 200, "{n}");
            assert!(n["pid_offset"].as_u64().unwrap() > 0, "the same pids on every node are told apart");
            assert!(n["residual_ns"].as_u64().unwrap() <= 20_000, "{n}");
        }
    }
    let ranks = ranked(&summary);
    assert_eq!(ranks.len(), 64);
    assert!(ranks.values().all(|p| p.len() == 1 && p[0]["rank_role"] == "main"));
    assert_eq!(summary["calls"]["read"]["count"], 64 * 200);
    assert_eq!(summary["ranks"]["ranks"].as_array().unwrap().len(), 64);

    let pq = dir.join("parquet");
    let id = export(&pq, &job);
    let ranks_written: Vec<String> = std::fs::read_dir(pq.join("events").join(format!("run={id}")))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(ranks_written.len(), 64, "one events partition per rank: {ranks_written:?}");
    // A second export of another run into the same folder leaves the first one's files.
    let single = dir.join("single.bin");
    synth_node(&single, 0, 1, 2, 10);
    let second = export(&pq, &single);
    assert_ne!(second, id);
    assert!(pq.join("events").join(format!("run={id}")).join("rank=63").join("part-0.parquet").is_file());
    if !require_python_modules(&["duckdb"]) {
        return;
    }
    let read = query("duckdb", &pq);
    assert_contract_columns(&read);
    assert_export_matches("duckdb", &read[&id], &summary, "synthetic merged run");
    assert_export_matches("duckdb", &read[&second], &summary_json(&single), "synthetic single run");
    if !require_python_modules(&["pyspark"]) || !require_program("java", "for PySpark") {
        return;
    }
    let read = query("spark", &pq);
    assert_export_matches("spark", &read[&id], &summary, "synthetic merged run");
    assert_export_matches("spark", &read[&second], &summary_json(&single), "synthetic single run");
}

/// A node's file cut short (its collector killed) merges and exports what it holds, with a
/// warning; a corrupted one is refused with the byte offset of the damage, not a panic.
#[test]
fn merge_and_export_of_damaged_node_files() {
    let dir = TempDir::new("damaged");
    let (a, b) = (dir.join("node0.bin"), dir.join("node1.bin"));
    synth_node(&a, 0, 2, 2, 50);
    synth_node(&b, 1, 2, 2, 50);
    let whole = std::fs::read(&b).unwrap();
    let job = dir.join("job.bin");
    let args = |inputs: &[&Path]| -> Vec<String> {
        let mut v = vec!["merge".to_string()];
        v.extend(inputs.iter().map(|p| p.display().to_string()));
        v.extend(["-o".to_string(), job.display().to_string()]);
        v
    };

    // Cut 100 bytes short: the end record and part of the last frame are gone.
    let cut = dir.join("node1-cut.bin");
    std::fs::write(&cut, &whole[..whole.len() - 100]).unwrap();
    let argv = args(&[&a, &cut]);
    let o = mlprof(&argv.iter().map(String::as_str).collect::<Vec<_>>());
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.contains("mlprof: warning:") && said.contains("node1-cut.bin"), "{said}");
    let merged = summary_json(&job);
    // Every process of both nodes is there (their frames precede the events), node 0's 100
    // reads, and none of node 1's: its one events frame is the one cut short.
    assert_eq!(ranked(&merged).len(), 4, "{merged}");
    assert_eq!(merged["calls"]["read"]["count"], 100, "{}", merged["calls"]);
    let o =
        mlprof(&["export", "--parquet", &dir.join("pq").display().to_string(), &cut.display().to_string()]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.contains("warning"), "export of a cut file warns: {said}");

    // Damage in the first frame's header (after the 16-byte file header: kind u16, 2 bytes,
    // length u32): refused with exit status 1 and a message saying what, never a panic.
    let refused = |range: std::ops::Range<usize>, want: &str| {
        let bad = dir.join("node1-bad.bin");
        let mut damaged = whole.clone();
        for byte in &mut damaged[range] {
            *byte = 0xff;
        }
        std::fs::write(&bad, &damaged).unwrap();
        let mut c = Command::new(&bins().mlprof);
        clean_env(&mut c).args(args(&[&a, &bad]));
        let o = output_with_timeout(c, limit());
        let said = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{said}");
        assert!(said.contains("mlprof: error:") && said.contains(want), "want {want:?}: {said}");
        assert!(!said.contains("panicked"), "{said}");
    };
    // A length no frame can have: corrupt, at the frame's offset.
    refused(20..24, "corrupt run file at byte 16: frame header kind 1 length 4294967295");
    // A kind no reader knows is skipped (formats only add kinds), which leaves this node
    // without its description and clocks: merge says so instead of guessing.
    refused(16..18, "no run description (RunInfo frame");
}
