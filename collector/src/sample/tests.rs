//! The sampler end to end over a real program: a C library built without frame pointers, two
//! hot functions each called by its own caller, a forked child; built with gcc at test time.
//!
//! Where the kernel refuses perf_event_open the test fails with the refusal's line, unless
//! `MLPROF_SAMPLE_REFUSAL_EXPECTED=1` says that this machine is known to refuse (then it
//! prints that it did not run).

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use object::{Object, ObjectSymbol};

use super::sampler::now_ns;
use super::{Record, gate, open};
use crate::testing::TempDir;

const LIBRARY: &str = r#"
#include <stdint.h>
/* Two loops that differ, so that nothing folds them into one function. */
__attribute__((noinline)) uint64_t hot_alpha(uint64_t n) {
    uint64_t x = 1;
    for (uint64_t i = 0; i < n; i++) { x = x * 6364136223846793005ULL + i; __asm__ volatile("" : "+r"(x)); }
    return x;
}
__attribute__((noinline)) uint64_t hot_beta(uint64_t n) {
    uint64_t x = 7;
    for (uint64_t i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x += i; __asm__ volatile("" : "+r"(x)); }
    return x;
}
/* Not tail calls: the result is used after the call returns. */
__attribute__((noinline)) uint64_t caller_alpha(uint64_t n) { return hot_alpha(n) ^ n; }
__attribute__((noinline)) uint64_t caller_beta(uint64_t n) { return hot_beta(n) + 3 * n; }
"#;

const PROGRAM: &str = r#"
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
uint64_t hot_alpha(uint64_t), hot_beta(uint64_t), caller_alpha(uint64_t), caller_beta(uint64_t);
static uint64_t now(clockid_t clock) {
    struct timespec ts; clock_gettime(clock, &ts); return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}
/* Spins in one library function for `ns` of wall time; returns its own CPU time. */
__attribute__((noinline)) uint64_t run_phase(int beta, uint64_t ns, uint64_t *sink) {
    uint64_t start = now(CLOCK_MONOTONIC), cpu = now(CLOCK_THREAD_CPUTIME_ID);
    while (now(CLOCK_MONOTONIC) - start < ns) *sink += beta ? caller_beta(100000) : caller_alpha(100000);
    return now(CLOCK_THREAD_CPUTIME_ID) - cpu;
}
int main(void) {
    uint64_t sink = 0, t0, t1, cpu;
    printf("fn hot_alpha %lu\nfn hot_beta %lu\nfn caller_alpha %lu\nfn caller_beta %lu\nfn run_phase %lu\n",
           (unsigned long)hot_alpha, (unsigned long)hot_beta, (unsigned long)caller_alpha,
           (unsigned long)caller_beta, (unsigned long)run_phase);
    t0 = now(CLOCK_MONOTONIC); cpu = run_phase(0, 500000000, &sink); t1 = now(CLOCK_MONOTONIC);
    printf("phase alpha %d %lu %lu %lu\n", (int)getpid(), t0, t1, cpu);
    t0 = now(CLOCK_MONOTONIC); cpu = run_phase(1, 500000000, &sink); t1 = now(CLOCK_MONOTONIC);
    printf("phase beta %d %lu %lu %lu\n", (int)getpid(), t0, t1, cpu);
    fflush(stdout);
    t0 = now(CLOCK_MONOTONIC);
    pid_t child = fork();
    if (child == 0) {
        cpu = run_phase(0, 300000000, &sink);
        printf("phase child %d %lu %lu %lu\n", (int)getpid(), t0, now(CLOCK_MONOTONIC), cpu);
        fflush(stdout);
        _exit(sink == 42);
    }
    int status;
    waitpid(child, &status, 0);
    printf("sink %lu\n", sink);
    return 0;
}
"#;

fn gcc(args: &[&str]) {
    let out = Command::new("gcc").args(args).output().unwrap_or_else(|e| panic!("cannot run gcc: {e}"));
    assert!(out.status.success(), "gcc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Builds the library and the program, both `-O2 -fomit-frame-pointer`: only DWARF CFI can
/// unwind them.
fn build(dir: &Path) -> (String, String) {
    let lib = dir.join("libhot.so").display().to_string();
    let prog = dir.join("prog").display().to_string();
    let (lib_c, prog_c) = (dir.join("hot.c"), dir.join("prog.c"));
    std::fs::write(&lib_c, LIBRARY).unwrap();
    std::fs::write(&prog_c, PROGRAM).unwrap();
    let flags = ["-O2", "-fomit-frame-pointer", "-g0", "-Wl,--build-id"];
    gcc(&[&flags[..], &["-fPIC", "-shared", "-o", &lib, &lib_c.display().to_string()]].concat());
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let dir_flag = format!("-L{}", dir.display());
    gcc(&[
        &flags[..],
        &["-fPIE", "-pie", "-o", &prog, &prog_c.display().to_string(), &dir_flag, "-lhot", &rpath],
    ]
    .concat());
    (lib, prog)
}

/// The size of each defined function of an ELF file, by name.
fn function_sizes(path: &str) -> HashMap<String, u64> {
    let bytes = std::fs::read(path).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    file.symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .filter_map(|s| Some((s.name().ok()?.to_string(), s.size())))
        .collect()
}

/// A phase as the program printed it: pid, start, end (CLOCK_MONOTONIC ns), CPU time.
#[derive(Debug, Clone, Copy)]
struct Phase {
    pid: u32,
    start: u64,
    end: u64,
    cpu_ns: u64,
}

struct Output {
    functions: HashMap<String, (u64, u64)>,
    phases: HashMap<String, Phase>,
}

fn parse_output(text: &str, sizes: &HashMap<String, u64>) -> Output {
    let (mut functions, mut phases) = (HashMap::new(), HashMap::new());
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        match words[..] {
            ["fn", name, address] => {
                let start: u64 = address.parse().unwrap();
                let size = *sizes.get(name).unwrap_or_else(|| panic!("no symbol {name}"));
                functions.insert(name.to_string(), (start, start + size));
            }
            ["phase", name, pid, start, end, cpu] => {
                let n = |s: &str| s.parse::<u64>().unwrap();
                let phase = Phase { pid: n(pid) as u32, start: n(start), end: n(end), cpu_ns: n(cpu) };
                phases.insert(name.to_string(), phase);
            }
            _ => {}
        }
    }
    Output { functions, phases }
}

/// What the test keeps of the records.
#[derive(Default)]
struct Seen {
    /// (pid, time, frames): the program's threads are its processes' only ones (tid = pid).
    samples: Vec<(u32, u64, Vec<u64>)>,
    exits: Vec<u32>,
    mappings: Vec<super::Mapping>,
    forks: Vec<(u32, u32)>,
    execs: Vec<(u32, String)>,
    drain_cpu_ns: u64,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Seen {
    fn take(&mut self, record: Record<'_>) {
        match record {
            Record::Sample(s) => {
                assert_eq!(s.tid, s.pid, "a single-threaded program");
                self.samples.push((s.pid, s.time_ns, s.frames.to_vec()));
            }
            Record::Exit { pid, tid, .. } if pid == tid => self.exits.push(pid),
            Record::Mapping(m) => self.mappings.push(m),
            Record::Fork { pid, ppid, .. } if pid != ppid => self.forks.push((ppid, pid)),
            Record::Comm { pid, name, exec: true, .. } => self.execs.push((pid, name)),
            _ => {}
        }
    }
}

/// How many of `samples` (their frames) have `leaf` as leaf, and of those how many have
/// `caller` then `outer` as the next frames (return addresses: `- 1` lies in the call).
fn count(
    samples: &[&Vec<u64>],
    f: &HashMap<String, (u64, u64)>,
    leaf: &str,
    caller: &str,
    outer: &str,
) -> (usize, usize) {
    let within = |address: u64, name: &str| (f[name].0..f[name].1).contains(&address);
    let leaves: Vec<_> = samples.iter().filter(|frames| within(frames[0], leaf)).collect();
    let chained = leaves
        .iter()
        .filter(|frames| frames.len() >= 3 && within(frames[1] - 1, caller) && within(frames[2] - 1, outer))
        .count();
    (leaves.len(), chained)
}

/// The rate the end-to-end test samples at: its phases are sized for it (not the default, which
/// is chosen for cost).
const HZ: u32 = 499;

#[test]
fn samples_a_program_without_frame_pointers_and_its_fork() {
    let dir = TempDir::new("sample-e2e");
    let (lib, prog) = build(dir.path());
    let before = now_ns();
    let mut cmd = Command::new(&prog);
    cmd.stdout(Stdio::piped());
    let (child, attached) = gate::spawn_attached(cmd, |pid| open(pid, HZ));
    let mut child = child.unwrap();
    let mut sampler = match attached.expect("the child was forked") {
        Ok(sampler) => sampler,
        Err(refusal) => {
            child.wait().unwrap();
            if std::env::var_os("MLPROF_SAMPLE_REFUSAL_EXPECTED").is_some_and(|v| v == "1") {
                eprintln!("NOT RUN (refusal expected here): {refusal}");
                return;
            }
            panic!("{refusal} (set MLPROF_SAMPLE_REFUSAL_EXPECTED=1 where this is known)");
        }
    };
    let mut seen = Seen::default();
    while child.try_wait().unwrap().is_none() {
        sampler.wait(std::time::Duration::from_millis(20));
        let cpu = thread_cpu_ns();
        sampler.drain(&mut |r| seen.take(r));
        seen.drain_cpu_ns += thread_cpu_ns() - cpu;
    }
    let cpu = thread_cpu_ns();
    let stats = sampler.finish(&mut |r| seen.take(r));
    seen.drain_cpu_ns += thread_cpu_ns() - cpu;
    let after = now_ns();
    let mut text = String::new();
    child.stdout.take().unwrap().read_to_string(&mut text).unwrap();
    let sizes: HashMap<String, u64> = function_sizes(&lib).into_iter().chain(function_sizes(&prog)).collect();
    let out = parse_output(&text, &sizes);
    check(&seen, &out, stats, (before, after), &lib);
}

fn check(seen: &Seen, out: &Output, stats: super::Stats, (before, after): (u64, u64), lib: &str) {
    let (alpha, beta, forked) = (out.phases["alpha"], out.phases["beta"], out.phases["child"]);
    let main = alpha.pid;
    eprintln!(
        "samples {} (unwound {}), lost {}, files {}, drain CPU {:.1} µs a sample",
        stats.samples,
        stats.unwound,
        stats.lost,
        stats.files,
        seen.drain_cpu_ns as f64 / 1000.0 / stats.samples.max(1) as f64
    );
    assert_eq!(stats.samples as usize, seen.samples.len());
    assert_eq!(stats.malformed, 0);
    for (_, time, _) in &seen.samples {
        assert!((before..=after).contains(time), "sample at {time} outside the run {before}..{after}");
    }
    // The kernel's tick is on each thread's CPU time: as many samples as CPU-seconds × Hz.
    let cpu_s = (alpha.cpu_ns + beta.cpu_ns + forked.cpu_ns) as f64 / 1e9;
    let expected = cpu_s * f64::from(HZ);
    let got = (stats.samples + stats.lost) as f64;
    assert!(
        got >= 0.85 * expected && got <= 1.15 * expected + 20.0,
        "{got} samples for {expected:.0} expected"
    );

    let in_phase = |phase: Phase| -> Vec<&Vec<u64>> {
        let window = phase.start..=phase.end;
        seen.samples
            .iter()
            .filter(|(pid, t, _)| *pid == phase.pid && window.contains(t))
            .map(|s| &s.2)
            .collect()
    };
    for (name, phase, leaf, caller) in [
        ("alpha", alpha, "hot_alpha", "caller_alpha"),
        ("beta", beta, "hot_beta", "caller_beta"),
        ("child", forked, "hot_alpha", "caller_alpha"),
    ] {
        let samples = in_phase(phase);
        let (leaves, chained) = count(&samples, &out.functions, leaf, caller, "run_phase");
        eprintln!(
            "{name}: {} samples, {leaves} in {leaf}, {chained} of them unwound to {caller} and run_phase",
            samples.len()
        );
        assert!(samples.len() >= 20, "{name}: {} samples", samples.len());
        assert!(leaves * 10 >= samples.len() * 9, "{name}: {leaves} of {} samples in {leaf}", samples.len());
        assert_eq!(chained, leaves, "{name}: every sample in {leaf} unwinds through {caller} into run_phase");
    }
    assert!(
        seen.forks.contains(&(main, forked.pid)),
        "the fork {main} → {} was recorded: {:?}",
        forked.pid,
        seen.forks
    );
    assert!(
        seen.execs.iter().any(|(pid, name)| *pid == main && name == "prog"),
        "the exec: {:?}",
        seen.execs
    );
    let mapped = seen.mappings.iter().find(|m| m.pid == main && m.path == lib).expect("libhot.so's mapping");
    let bytes = std::fs::read(lib).unwrap();
    let build_id = object::File::parse(&*bytes).unwrap().build_id().unwrap().map(<[u8]>::to_vec);
    assert!(build_id.is_some());
    assert_eq!(mapped.build_id, build_id);
    assert!((mapped.start..mapped.end).contains(&out.functions["hot_alpha"].0));
}
