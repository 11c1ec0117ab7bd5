//! Never hurt the job: the profiled program behaves exactly as without mlprof, whatever its
//! container, its arguments, its signals, its way of making processes, its allocator, or the
//! collector's comings and goings — and every call it made is recorded or counted as dropped.

use std::path::Path;
use std::process::{Command, Output};

use mlprof_tests::*;

/// Runs `mlprof-collect --out OUT -- CMD` in a private mount namespace whose /dev/shm is a
/// fresh tmpfs of `size` (as a container gives it).
fn collect_in_small_shm(size: &str, out: &Path, cmd: &[&str]) -> Output {
    collect_in_small_shm_with(size, &[], out, cmd)
}

/// As [`collect_in_small_shm`], with collector options `args` before `--out`.
fn collect_in_small_shm_with(size: &str, args: &[&str], out: &Path, cmd: &[&str]) -> Output {
    let mut c = Command::new("unshare");
    clean_env(&mut c);
    c.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!("mount -t tmpfs -o size={size} tmpfs /dev/shm && exec \"$@\""))
        .arg("sh")
        .arg(&bins().collect)
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--")
        .args(cmd);
    output_with_timeout(c, default_timeout())
}

/// A container's /dev/shm: 40 threads write at once into a ring sized for 64 MiB, then 8 MiB,
/// then 1 MiB of shared memory. The program always finishes normally (no SIGBUS); every write
/// is recorded or counted as dropped; the collector says how to give it more memory; and with
/// no room for a ring at all, the program runs unprofiled with an error line.
#[test]
fn small_shared_memory_never_kills_the_job() {
    if !require_root("to mount a small tmpfs on /dev/shm in a private mount namespace")
        || !require_program("unshare", "to make a private mount namespace")
    {
        return;
    }
    const THREADS: u64 = 40;
    const WRITES: u64 = 50_000;
    let dir = TempDir::new("small-shm");
    let prog = compile("mtwriter", &dir);
    for size in ["64m", "8m"] {
        let data = dir.join(size);
        std::fs::create_dir_all(&data).unwrap();
        let out = dir.join(format!("run-{size}.bin"));
        let o = collect_in_small_shm(
            size,
            &out,
            &[&prog, &data.display().to_string(), &THREADS.to_string(), &WRITES.to_string(), "1", "join"],
        );
        assert!(o.status.success(), "{size}: the program must finish normally\n{}", describe(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout), format!("done {}\n", THREADS * WRITES), "{size}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.contains("--shm-size") && stderr.contains("MLPROF_SHM_DIR"),
            "{size}: the collector must say how to give mlprof more shared memory:\n{stderr}"
        );
        let s = Summary::load(&out);
        assert!(!s.truncated(), "{size}: run file truncated");
        let calls = s.calls();
        let mut e = s.expect();
        // The main thread claims its lane before any worker starts and makes few calls: it
        // records all of them; what the workers could not record is counted.
        e.eq(format_args!("{size}: opens (main thread)"), calls.count("open"), THREADS + 1);
        e.eq(
            format_args!("{size}: recorded + dropped writes"),
            calls.count("write") + s.dropped(),
            THREADS * WRITES,
        );
        e.finish();
    }
    // Not even one lane fits: the job runs, unprofiled, and says why.
    let data = dir.join("1m");
    std::fs::create_dir_all(&data).unwrap();
    let out = dir.join("run-1m.bin");
    let o = collect_in_small_shm("1m", &out, &[&prog, &data.display().to_string(), "4", "1000", "1", "join"]);
    assert!(o.status.success(), "1m: the program must run unprofiled\n{}", describe(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "done 4000\n");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("without profiling") && stderr.contains("--shm-size"), "{stderr}");
}

/// A lane grows as its thread writes (its first 256 KiB are backed before the claim, more as
/// the head gets there). When the job itself takes nearly all of /dev/shm first (as a DataLoader's
/// shared tensors can), growing fails: the program still finishes normally (no SIGBUS), the
/// threads' first records are recorded, and every write is recorded or counted as dropped.
#[test]
fn a_lane_that_cannot_grow_drops_and_counts_and_never_kills_the_job() {
    if !require_root("to mount a small tmpfs on /dev/shm in a private mount namespace")
        || !require_program("unshare", "to make a private mount namespace")
        || !require_program("dd", "to fill /dev/shm as the job")
        || !require_program("df", "to see how much of /dev/shm is left")
    {
        return;
    }
    const THREADS: u64 = 4;
    const WRITES: u64 = 100_000;
    let dir = TempDir::new("full-shm");
    let prog = compile("mtwriter", &dir);
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let out = dir.join("run.bin");
    // 16 lanes of 4 MiB fit a quarter of 300 MiB whole: lanes are open and grow as usual.
    // The job's own data takes all but 3 MiB: room for the first 256 KiB of every lane the
    // program and the collector's spares need (about 2.3 MiB), whoever backs them first, and
    // not for the 4 MiB each thread's lane grows to. (Filling to the last block raced with the
    // collector: when dd won, the exec'd program found no lane at all, 1 run in 6.) dd runs
    // unprofiled, so the writes counted are the program's alone.
    let fill = "left=$(df -k --output=avail /dev/shm | tail -n 1); \
                env -u LD_PRELOAD dd if=/dev/zero of=/dev/shm/job-tensors bs=64k count=$(( (left - 3072) / 64 )) \
                2>/dev/null; exec \"$0\" \"$@\"";
    let o = collect_in_small_shm_with(
        "300m",
        &["--lanes", "16"],
        &out,
        &[
            "sh",
            "-c",
            fill,
            &prog,
            &data.display().to_string(),
            &THREADS.to_string(),
            &WRITES.to_string(),
            "1",
            "join",
        ],
    );
    assert!(o.status.success(), "the program must finish normally\n{}", describe(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), format!("done {}\n", THREADS * WRITES));
    let s = Summary::load(&out);
    assert!(!s.truncated(), "run file truncated");
    let writes = s.calls().count("write");
    let mut e = s.expect();
    e.eq("recorded + dropped writes", writes + s.dropped(), THREADS * WRITES);
    e.that("writes were dropped: the lanes could not grow", s.dropped() > 0);
    e.that("the records that fit were recorded", writes > 0);
    e.finish();
}

/// Runs `prog` bare and under the collector (writing `out`): both succeed and print the same
/// results and errno values.
fn run_bare_and_profiled_alike(prog: &str, out: &std::path::Path) {
    let mut bare = Command::new(prog);
    clean_env(&mut bare);
    let bare = output_with_timeout(bare, default_timeout());
    assert!(bare.status.success(), "{}", describe(&bare));
    let profiled = run_collect_ok(out, &[prog]);
    assert_eq!(
        String::from_utf8_lossy(&profiled.stdout),
        String::from_utf8_lossy(&bare.stdout),
        "results and errno under mlprof must equal those without it"
    );
}

/// Every hooked libc function that takes a pointer, called with invalid ones (and with invalid
/// flags or modes beside a bad pointer): the same return values and errno as without mlprof,
/// no crash, every call recorded.
#[test]
fn invalid_pointers_fail_as_without_mlprof() {
    let dir = TempDir::new("badptr");
    let prog = compile("badptr", &dir);
    let out = dir.join("run.bin");
    run_bare_and_profiled_alike(&prog, &out);
    let s = clean_summary(&out);
    let p = s.proc_exact(&prog);
    let calls = p.calls();
    let mut e = s.expect();
    // (function, calls, failed calls): see tests/programs/badptr.c.
    let expected = [
        ("open", 6, 4),
        ("open64", 1, 1),
        ("openat", 2, 2),
        ("openat64", 1, 1),
        ("creat", 1, 1),
        ("fopen", 3, 3),
        ("fopen64", 1, 1),
        ("readv", 2, 2),
        ("writev", 2, 2),
        ("preadv", 1, 1),
        ("pwritev", 1, 1),
        ("read", 1, 1),
        ("write", 1, 0),
        ("pread", 1, 1),
        ("pwrite", 1, 0),
        ("ioctl", 1, 1),
        ("mmap", 1, 0),
    ];
    for (f, count, errors) in expected {
        e.eq(format_args!("badptr: {f} calls"), calls.count(f), count);
        e.eq(format_args!("badptr: {f} errors"), calls.errors(f), errors);
    }
    e.finish();
}

/// Issue 16's hooks (stat family, access, namespace, directories, descriptors, space, copies,
/// terminal) called with invalid pointers, descriptors and flags: the same return values and
/// errno as without mlprof, no crash, every call recorded as failed.
#[test]
fn invalid_pointers_in_metadata_calls_fail_as_without_mlprof() {
    let dir = TempDir::new("badptr-meta");
    let prog = compile("badptr_meta", &dir);
    let out = dir.join("run.bin");
    run_bare_and_profiled_alike(&prog, &out);
    let s = clean_summary(&out);
    let calls = s.proc_exact(&prog).calls();
    let mut e = s.expect();
    // (function, calls): every one fails; see tests/programs/badptr_meta.c.
    let expected = [
        ("stat", 4),
        ("lstat", 1),
        ("fstatat", 3),
        ("fstat", 1),
        ("statx", 2),
        ("__xstat", 1),
        ("access", 2),
        ("faccessat", 1),
        ("mkdir", 1),
        ("mkdirat", 1),
        ("rmdir", 1),
        ("unlink", 1),
        ("unlinkat", 1),
        ("rename", 2),
        ("renameat", 1),
        ("fdopendir", 1),
        ("closedir", 1),
        ("getdents64", 1),
        ("dup", 1),
        ("dup2", 1),
        ("dup3", 1),
        ("fcntl", 1),
        ("ftruncate", 1),
        ("fallocate", 1),
        ("posix_fadvise", 1),
        ("sendfile", 1),
        ("copy_file_range", 1),
        ("isatty", 1),
        ("tcgetattr", 1),
    ];
    for (f, count) in expected {
        e.eq(format_args!("badptr_meta: {f} calls"), calls.count(f), count);
        e.eq(format_args!("badptr_meta: {f} errors"), calls.errors(f), count);
    }
    e.finish();
}

/// A 10 kHz SIGALRM handler calls clock_gettime and write while the main loop makes millions
/// of clock reads: every clock read is counted exactly (the handler's included), and every
/// write is recorded or counted as interrupted.
#[test]
fn signal_storm_counts_are_exact() {
    const N: u64 = 3_000_000;
    let dir = TempDir::new("sigstorm");
    let prog = compile("sigstorm", &dir);
    let out = dir.join("run.bin");
    let o = run_collect_ok(&out, &[&prog, &N.to_string()]);
    let handled: u64 = String::from_utf8_lossy(&o.stdout)
        .trim()
        .strip_prefix("handled ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `handled H` line\n{}", describe(&o)));
    assert!(handled > 0, "the timer never fired");
    let s = Summary::load(&out);
    let calls = s.calls();
    let mut e = s.expect();
    e.eq("clock_gettime (loop + handler)", calls.count("clock_gettime"), N + handled);
    e.eq("recorded + dropped writes (loop + handler)", calls.count("write") + s.dropped(), N / 16 + handled);
    e.eq("every drop is a handler's call during a record", s.drops("interrupted"), s.dropped());
    e.finish();
}

/// Processes made by raw clone (glibc's clone without CLONE_VM, and syscall(SYS_clone)) get a
/// lane of their own: exact counts per process, nothing dropped.
#[test]
fn raw_clone_children_have_their_own_lanes() {
    const N: u64 = 20_000;
    let dir = TempDir::new("rawclone");
    let prog = compile("rawclone", &dir);
    let out = dir.join("run.bin");
    let o = run_collect_ok(&out, &[&prog, &N.to_string()]);
    let pids: Vec<u64> =
        String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect();
    assert_eq!(pids.len(), 3, "`PARENT CLONE SYSCALL` pids\n{}", describe(&o));
    let s = clean_summary(&out);
    let mut e = s.expect();
    for (who, pid, want) in
        [("parent", pids[0], vec![("open", 1), ("write", N)]), ("clone child", pids[1], vec![("write", N)])]
            .into_iter()
            .chain([("syscall(SYS_clone) child", pids[2], vec![("write", N)])])
    {
        let found = s.procs_with_pid(pid);
        assert_eq!(found.len(), 1, "one process {pid}");
        let p = found.into_iter().next().unwrap();
        e.calls(who, p.calls(), &want, &[("write", 8 * N)]);
        if pid != pids[0] {
            e.eq(format_args!("{who}'s parent"), p.ppid(), pids[0]);
            e.exit_code(who, p, 0);
        }
    }
    e.finish();
}

/// A process that execs keeps its pid; the lanes of its earlier images (the exec'ing thread's
/// and those of threads the exec ended) are freed by the collector: the last image finds only
/// its own lane in the ring.
#[test]
fn exec_frees_the_lanes_of_the_replaced_image() {
    let dir = TempDir::new("execlanes");
    let prog = compile("execlanes", &dir);
    let out = dir.join("run.bin");
    let o = run_collect_ok(&out, &[&prog, "0", "3"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "lanes 1\n", "{}", describe(&o));
    let s = clean_summary(&out);
    let mut e = s.expect();
    e.eq("writes of all images", s.calls().count("write"), 3 * 4 + 1);
    e.eq("images", s.processes().len() as u64, 4);
    e.finish();
}

/// pthread_cancel of a thread blocked in a hooked read: the cancellation unwinds through the
/// hook, the cleanup handler runs, the program's output is the same as without mlprof, and the
/// call the thread was cancelled in is counted (as interrupted).
#[test]
fn cancelling_a_thread_inside_a_hooked_call_works_as_without_mlprof() {
    let dir = TempDir::new("cancel");
    let prog = compile("cancel", &dir);
    let mut c = Command::new(&prog);
    clean_env(&mut c);
    let bare = output_with_timeout(c, default_timeout());
    assert!(bare.status.success(), "{}", describe(&bare));
    assert_eq!(String::from_utf8_lossy(&bare.stdout), "canceled 1 cleaned 1\n");
    let out = dir.join("run.bin");
    let o = run_collect_ok(&out, &[&prog]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "canceled 1 cleaned 1\n", "{}", describe(&o));
    let s = Summary::load(&out);
    let mut e = s.expect();
    e.eq("recorded + dropped reads", s.calls().count("read") + s.dropped(), 1);
    e.eq("the read the thread was cancelled in", s.drops("interrupted"), 1);
    e.finish();
}

/// A malloc replacement preloaded beside libmlprof.so (as PyTorch users do with jemalloc or
/// tcmalloc): it calls our hooks from inside its own initialization, with its lock held. No
/// hang, and the program's own calls are counted exactly.
#[test]
fn preloaded_malloc_replacements_run_with_exact_counts() {
    for lib in ["/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"] {
        if !Path::new(lib).exists() {
            skip(format!("{lib} is missing (Debian: apt-get install libjemalloc2 libgoogle-perftools4)"));
            continue;
        }
        let dir = TempDir::new("malloc");
        let prog = compile("threads_fork", &dir);
        let out = dir.join("run.bin");
        let o = run_collect_env(
            &out,
            &[],
            &[&prog, &dir.str(), "4", "500"],
            &[("LD_PRELOAD", lib)],
            default_timeout(),
        );
        assert!(o.status.success(), "{lib}\n{}", describe(&o));
        let s = clean_summary(&out);
        let calls = s.calls();
        let mut e = s.expect();
        // threads_fork's own calls (see its header): 4 threads x 500 iterations of write, pread
        // and ioctl in each of the two processes; the allocator may add calls of its own (maps,
        // reads of /proc), which are the process's calls too.
        for f in ["write", "pread", "ioctl"] {
            e.eq(format_args!("{lib}: {f}"), calls.count(f), 2 * 4 * 500);
        }
        e.finish();
    }
}

/// Capture windows: a long-running process stays up while its session's collector is stopped
/// (Ctrl-C) and another one started, then killed (SIGKILL) and another started: each new
/// collector records the process again, without a restart, and everything it did while a
/// collector served it is in that collector's run.
#[test]
fn a_session_restarted_under_a_running_process_records_it_again() {
    let dir = TempDir::new("windows");
    let prog = compile("windows", &dir);
    let session = unique_session("windows");
    let mut program = Driven::spawn(preloaded_command(&prog, &session), true, default_timeout());
    let wait_for_lane = |program: &mut Driven, what: &str| {
        // The process notices a new collector on its own (it looks about every 0.5 s while
        // waiting); each "write 1" is a hooked call that gives it the chance.
        for _ in 0..400 {
            program.say(&format!("write {} 1", dir.file("probe.dat")));
            assert_eq!(program.read_line(what), "wrote 1");
            program.say("peek");
            if program.read_line(what) == "lane 1" {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("{what}: the process never joined the new collector");
    };
    let mut runs = Vec::new();
    for (window, end) in [("a", "stop"), ("b", "kill"), ("c", "stop")] {
        let out = dir.join(format!("{window}.bin"));
        let mut collector = AttachCollector::start(&out, &session);
        wait_for_lane(&mut program, window);
        let path = dir.file(&format!("{window}.dat"));
        program.say(&format!("write {path} 300"));
        assert_eq!(program.read_line(window), "wrote 300");
        match end {
            "stop" => collector.stop_ok(),
            _ => {
                collector.kill9();
            }
        }
        runs.push((window, end, out, path));
    }
    program.say("exit");
    let done = program.finish("the program hung");
    assert!(done.status.success(), "the program must run on unaffected: {}", done.stderr);
    for (_window, end, out, path) in runs {
        if end == "kill" {
            // A SIGKILLed collector's file holds what it had flushed; the next window matters.
            continue;
        }
        let s = Summary::load(&out);
        let mut e = s.expect();
        // The process announced itself to this collector (exactly one entry for it).
        s.proc_exact(&prog);
        e.file(s.file(&path), 1, &[("write", 300)], 0, 2400);
        e.finish();
    }
}
