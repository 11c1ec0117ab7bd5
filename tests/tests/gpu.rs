//! GPU entry points without a GPU: the real CUDA runtime and NCCL from the NVIDIA wheels
//! (installed with torch in the test virtual environment) fail fast without a driver, and
//! mlprof must record every call faithfully; the driver layer uses the libcuda test double in
//! tests/doubles (there is no real driver here) to prove that cuGetProcAddress and dlsym on a
//! libcuda handle hand back mlprof's wrappers.
//!
//! On a machine with an NVIDIA GPU (`nvidia-smi -L` lists one), the device check scripts in
//! tests/gpu/ run too; elsewhere those two tests are skipped, said and counted.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use mlprof_tests::*;
use serde_json::Value;

fn program(name: &str) -> String {
    tests_dir().join("programs").join(name).display().to_string()
}

/// The `"status"` args of the trace's events named `func`.
fn traced_statuses(trace: &Value, func: &str) -> Vec<i64> {
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == func)
        .map(|e| e["args"]["status"].as_i64().unwrap_or(i64::MIN))
        .collect()
}

const RUNTIME_CALLS: &[&str] = &[
    "cudaLaunchKernel",
    "cudaLaunchKernel_ptsz",
    "cudaLaunchKernelExC",
    "cudaLaunchCooperativeKernel",
    "cudaMemcpy",
    "cudaMemcpy_ptds",
    "cudaMemcpyAsync",
    "cudaMemcpyAsync_ptsz",
    "cudaMemcpy2D",
    "cudaMemset",
    "cudaMemsetAsync",
    "cudaMalloc",
    "cudaFree",
    "cudaMallocAsync",
    "cudaFreeAsync",
    "cudaMallocHost",
    "cudaHostAlloc",
    "cudaFreeHost",
    "cudaStreamSynchronize",
    "cudaStreamSynchronize_ptsz",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaEventRecord",
    "cudaEventQuery",
    "cudaStreamWaitEvent",
    "cudaStreamQuery",
    "cudaGraphLaunch",
];

/// Runs tests/programs/cuda_calls.c (a shared library linked against the real libcudart)
/// loaded `linked` normally or through dlopen(RTLD_LOCAL), from 4 threads × 50 iterations.
fn runtime_calls(linked: bool) {
    const THREADS: u64 = 4;
    const ITERATIONS: u64 = 50;
    let Some((cudart_dir, cudart)) = nvidia_library(&["libcudart.so.13", "libcudart.so.12"]) else {
        return;
    };
    let dir = TempDir::new(if linked { "cuda-linked" } else { "cuda-local" });
    let lib = dir.join("libcuda_calls.so").display().to_string();
    let rpath = format!("-Wl,-rpath,{}", cudart_dir.display());
    let link = format!("-l:{cudart}");
    let libdir = format!("-L{}", cudart_dir.display());
    gcc(&[
        "-O1",
        "-fPIC",
        "-shared",
        "-pthread",
        "-o",
        &lib,
        &program("cuda_calls.c"),
        &libdir,
        &link,
        &rpath,
    ]);
    let main = dir.join("cuda_main").display().to_string();
    if linked {
        let here = format!("-L{}", dir.str());
        let rpath_here = format!("-Wl,-rpath,{}", dir.str());
        gcc(&["-O1", "-DLINKED", "-o", &main, &program("cuda_main.c"), &here, "-lcuda_calls", &rpath_here]);
    } else {
        gcc(&["-O1", "-o", &main, &program("cuda_main.c"), "-ldl"]);
    }
    let out = dir.join("run.bin");
    // The wheel's own libcupti named for the GPU timeline: without a driver no cuInit succeeds,
    // so it must never be touched (CUPTI 13.2 without a libcuda overflows its stack in
    // cuptiGetVersion), and the job runs as it would without mlprof.
    let cupti =
        nvidia_library(&["libcupti.so.13", "libcupti.so.12"]).map(|(d, n)| d.join(n).display().to_string());
    let env = cupti.iter().map(|path| ("MLPROF_CUPTI", path.as_str())).collect::<Vec<_>>();
    let args = [main.clone(), dir.str(), lib, THREADS.to_string(), ITERATIONS.to_string()];
    let o = run_collect_env(&out, &[], &args, &env, default_timeout());
    assert!(o.status.success(), "mlprof-collect failed\n{}", describe(&o));
    let summary = Summary::load(&out);
    summary.assert_clean();
    let got = statuses(&dir.join("status.txt"));
    let calls = summary.calls();
    let mut e = summary.expect();
    let n = THREADS * ITERATIONS;
    for &func in RUNTIME_CALLS {
        // cudaGraphLaunch is called once more, alone, before the threads start.
        let want = if func == "cudaGraphLaunch" { n + 1 } else { n };
        let code = got[func];
        e.that(format_args!("{func}: count {} want {want}", calls.count(func)), calls.count(func) == want);
        let errors = if code != 0 { want } else { 0 };
        e.that(
            format_args!("{func}: errors {} want {errors}", calls.errors(func)),
            calls.errors(func) == errors,
        );
    }
    e.that(
        format_args!("cudaSetDevice count {}", calls.count("cudaSetDevice")),
        calls.count("cudaSetDevice") == 1,
    );
    let gpu = &summary.json["gpu"];
    let copies = &gpu["copies"];
    // Per iteration: H2D 1024 (cudaMemcpy) + 128 (cudaMemcpy2D); D2H 512 + 2048; D2D 256.
    for (direction, calls_per, bytes_per) in [("H2D", 2, 1024 + 128), ("D2H", 2, 512 + 2048), ("D2D", 1, 256)]
    {
        let calls = copies[direction]["calls"].as_u64().unwrap_or(0);
        let bytes = copies[direction]["bytes"].as_u64().unwrap_or(0);
        e.that(format_args!("{direction}: {calls} copies"), calls == calls_per * n);
        e.that(format_args!("{direction}: {bytes} bytes"), bytes == bytes_per * n);
    }
    let kernels = gpu["kernels"].as_array().cloned().unwrap_or_default();
    e.that(format_args!("kernels {kernels:?}"), kernels.len() == 1 && kernels[0]["name"] == "my_kernel");
    e.that(
        format_args!("kernel launches {:?}", kernels.first().map(|k| &k["launches"])),
        kernels.first().and_then(|k| k["launches"].as_u64()) == Some(4 * n),
    );
    let blocked = gpu["host_blocked_ns"].as_u64().unwrap_or(0);
    e.that(format_args!("host blocked {blocked} ns > 0"), blocked > 0);
    let timeline = &gpu["timeline"];
    let why = timeline["unavailable"].as_str().unwrap_or("");
    e.that(
        format_args!("GPU timeline {timeline}"),
        timeline["source"].is_null() && why.contains("no process initialized CUDA successfully"),
    );
    e.finish();

    // The trace carries each call's real status and the launch arguments.
    let trace = convert_trace(&out);
    for func in ["cudaMalloc", "cudaLaunchKernel", "cudaStreamSynchronize"] {
        let statuses = traced_statuses(&trace, func);
        assert_eq!(statuses.len() as u64, n, "{func} events in the trace");
        assert!(statuses.iter().all(|&s| s == got[func]), "{func} statuses {statuses:?} want {}", got[func]);
    }
    let launch = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["ph"] == "X" && e["name"] == "cudaLaunchKernel")
        .expect("a cudaLaunchKernel event");
    assert_eq!(launch["args"]["kernel"], "my_kernel");
    assert_eq!(launch["args"]["grid"], serde_json::json!([4, 2, 1]));
    assert_eq!(launch["args"]["block"], serde_json::json!([128, 1, 1]));
    assert_eq!(launch["cat"], "cuda_runtime");
}

#[test]
fn cuda_runtime_calls_linked_normally() {
    runtime_calls(true);
}

#[test]
fn cuda_runtime_calls_under_rtld_local() {
    runtime_calls(false);
}

/// Driver entry points reached through dlsym on a libcuda handle, cuGetProcAddress_v2 (legacy
/// and per-thread-default-stream) and the cuGetProcAddress obtained from itself, against the
/// libcuda test double; the program checks that every call still reached the double.
#[test]
fn cuda_driver_entry_points_are_wrapped() {
    const N: u64 = 25;
    let dir = TempDir::new("cuda-driver");
    let double = dir.join("libcuda.so.1").display().to_string();
    let double_src = tests_dir().join("doubles").join("libcuda_double.c").display().to_string();
    gcc(&["-O1", "-shared", "-fPIC", "-o", &double, &double_src]);
    let main = dir.join("cuda_driver").display().to_string();
    gcc(&["-O1", "-o", &main, &program("cuda_driver.c"), "-ldl"]);
    let out = dir.join("run.bin");
    let o = run_collect_env(
        &out,
        &[],
        &[main.as_str(), &N.to_string()],
        &[("LD_LIBRARY_PATH", &dir.str())],
        default_timeout(),
    );
    assert!(o.status.success(), "the driver program failed under mlprof\n{}", describe(&o));
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(stdout.lines().next(), Some("ok"), "{stdout}");
    let summary = Summary::load(&out);
    summary.assert_clean();
    let calls = summary.calls();
    let mut e = summary.expect();
    for (func, count, errors) in [
        ("cuLaunchKernel", 4 * N, 0),
        ("cuLaunchKernel_ptsz", N, 0),
        ("cuMemcpyHtoD_v2", N, 0),
        ("cuMemAlloc_v2", N, 0),
        ("cuStreamSynchronize", N, N),
        ("cuCtxSynchronize", 1, 0),
    ] {
        e.that(format_args!("{func}: count {} want {count}", calls.count(func)), calls.count(func) == count);
        e.that(
            format_args!("{func}: errors {} want {errors}", calls.errors(func)),
            calls.errors(func) == errors,
        );
    }
    e.that(
        format_args!("cuMemcpyHtoD_v2 bytes {}", calls.bytes("cuMemcpyHtoD_v2")),
        calls.bytes("cuMemcpyHtoD_v2") == 4096 * N,
    );
    let kernels = summary.json["gpu"]["kernels"].as_array().cloned().unwrap_or_default();
    let by_name: BTreeMap<String, u64> = kernels
        .iter()
        .map(|k| (k["name"].as_str().unwrap_or("").to_string(), k["launches"].as_u64().unwrap_or(0)))
        .collect();
    // The double names handle 0x1234 with a mangled name; the tools demangle it.
    e.that(format_args!("kernels {by_name:?}"), by_name.get("testKernel(float*, int)") == Some(&(2 * N)));
    e.that(format_args!("kernels {by_name:?}"), by_name.get("other_kernel") == Some(&N));
    // A CUkernel (the CUDA 12+ runtime's own launches) is named through cuKernelGetName; one
    // the driver names neither way keeps its address.
    e.that(format_args!("kernels {by_name:?}"), by_name.get("libraryKernel()") == Some(&N));
    e.that(format_args!("kernels {by_name:?}"), by_name.get("kernel@0xdead") == Some(&N));
    // Each handle is looked up once per process, the nameless one included: cuFuncGetName for
    // 0x1234, 0x5678, 0x9abc and 0xdead, cuKernelGetName for the last two.
    e.that(format_args!("name lookups: {stdout}"), stdout.lines().nth(1) == Some("name lookups 4 2"));
    e.finish();
}

/// NCCL from the NVIDIA wheel: every intercepted function, with counts, statuses and bytes.
#[test]
fn nccl_calls() {
    const N: u64 = 20;
    let Some((nccl_dir, nccl)) = nvidia_library(&["libnccl.so.2"]) else {
        return;
    };
    let dir = TempDir::new("nccl");
    let main = dir.join("nccl_calls").display().to_string();
    let libdir = format!("-L{}", nccl_dir.display());
    let link = format!("-l:{nccl}");
    let rpath = format!("-Wl,-rpath,{}", nccl_dir.display());
    gcc(&["-O1", "-o", &main, &program("nccl_calls.c"), &libdir, &link, &rpath]);
    let out = dir.join("run.bin");
    run_collect_ok(&out, &[main, dir.str(), N.to_string()]);
    let summary = Summary::load(&out);
    summary.assert_clean();
    let got = statuses(&dir.join("status.txt"));
    let calls = summary.calls();
    let mut e = summary.expect();
    for (func, code) in &got {
        let errors = if *code != 0 { N } else { 0 };
        e.that(format_args!("{func}: count {} want {N}", calls.count(func)), calls.count(func) == N);
        e.that(
            format_args!("{func}: errors {} want {errors}", calls.errors(func)),
            calls.errors(func) == errors,
        );
    }
    // bytes = count × datatype size: 1024 float32, 256 float32, 128 float32, 512 int32, 64 float64.
    for (func, bytes) in [
        ("ncclAllReduce", 4096),
        ("ncclAllGather", 1024),
        ("ncclReduceScatter", 512),
        ("ncclBroadcast", 2048),
        ("ncclReduce", 512),
        ("ncclSend", 100),
        ("ncclRecv", 100),
    ] {
        e.that(
            format_args!("{func}: bytes {} want {}", calls.bytes(func), bytes * N),
            calls.bytes(func) == bytes * N,
        );
    }
    e.finish();
    let trace = convert_trace(&out);
    let send = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["ph"] == "X" && e["name"] == "ncclSend")
        .expect("an ncclSend event");
    assert_eq!(send["args"]["peer"], 3);
    assert_eq!(send["args"]["datatype"], "int8");
    assert_eq!(send["args"]["status"], got["ncclSend"]);
    let all_reduce = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "ncclAllReduce")
        .expect("ncclAllReduce");
    assert_eq!(all_reduce["args"]["op"], "sum");
    assert_eq!(all_reduce["args"]["datatype"], "float32");
    assert_eq!(all_reduce["cat"], "nccl");
}

/// The device checks share one GPU, and the energy check compares an idle phase with a burst:
/// they run one at a time.
static GPU: Mutex<()> = Mutex::new(());

/// Runs `tests/gpu/SCRIPT` (which prints what it measured and exits non-zero on a failed
/// check) with the test binaries and Python; skipped without a GPU.
fn device_check(script: &str) {
    if !require_gpu() || !require_torch() {
        return;
    }
    let _one_at_a_time = GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let python = python();
    let mut c = Command::new("bash");
    clean_env(&mut c)
        .arg(tests_dir().join("gpu").join(script))
        .env("PYTHON", &python)
        .env("MLPROF_TEST_PYTHON", &python)
        .env("MLPROF_BIN_DIR", &bins().dir);
    let o = output_with_timeout(c, default_timeout().max(Duration::from_secs(600)));
    eprintln!("{script}:\n{}", describe(&o));
    assert!(o.status.success(), "{script} failed on this GPU\n{}", describe(&o));
}

/// tests/gpu/cuda_check.sh: a PyTorch CUDA training loop (and an NCCL all-reduce when NCCL
/// starts) under mlprof-collect: named kernel launches, copies with bytes both ways,
/// synchronizations with host-blocked time, nothing dropped.
#[test]
fn cuda_check_script_on_a_real_gpu() {
    device_check("cuda_check.sh");
}

/// tests/gpu/timeline_check.sh: the GPU timeline on a real GPU: kernels = launches, each
/// linked; kernels and their GPU time per step within 2 % of torch.profiler's; torch.profiler
/// inside `--torch` sees what it sees alone; the cost pairs of both targets.
#[test]
fn timeline_check_script_on_a_real_gpu() {
    device_check("timeline_check.sh");
}

/// tests/gpu/energy_check.sh: GPU energy > 0, burst power above idle power, and mlprof's GPU
/// energy within 5% of the NVML energy counter read around the run.
#[test]
fn energy_check_script_on_a_real_gpu() {
    device_check("energy_check.sh");
}
