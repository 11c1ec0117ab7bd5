//! The Python wheel (`pip install .`, pyproject.toml): built once by pip into a temporary
//! directory, installed into a fresh virtual environment, used with `PATH` holding only that
//! environment's bin/ and the system's (launcher mode, then attach mode through
//! `LD_PRELOAD=$(mlprof-collect --print-preload)`, exact counts each time), then uninstalled,
//! leaving the environment as it was.
//!
//! Needs `python3` with venv and pip, and the package index for maturin (pip's isolated build
//! environment); without them the test prints a `SKIPPED` line saying why and passes. The
//! build shares the workspace's target directory, so after `cargo build --release` it links
//! the compiled crates instead of compiling them again.

use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mlprof_tests::{
    Calls, Guard, TempDir, clean_env, compile, default_timeout, describe, output_with_timeout,
};
use serde_json::Value;

/// Writes past the test harness's output capture, so the line shows in a plain `cargo test`.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn skip(reason: &str) {
    say(&format!("SKIPPED wheel::wheel_install_run_uninstall: {reason}"));
}

/// The workspace's target directory, as `cargo build --release` used it.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| mlprof_tests::workspace_root().join("target"))
}

/// The Python that makes the virtual environments: `$MLPROF_TEST_WHEEL_PYTHON`, else `python3`
/// (never the PyTorch test environment: the wheel must not land there).
fn base_python() -> PathBuf {
    std::env::var_os("MLPROF_TEST_WHEEL_PYTHON").map(PathBuf::from).unwrap_or_else(|| "python3".into())
}

/// `program` with none of the variables that steer libmlprof (the harness's clean_env).
fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    clean_env(&mut c);
    c
}

fn run_ok(cmd: Command, what: &str) -> Output {
    let o = output_with_timeout(cmd, default_timeout());
    assert!(o.status.success(), "{what} failed\n{}", describe(&o));
    o
}

/// Runs `cmd`, which runs `writer PATH n 0` (itself or under the collector): it must succeed
/// and pass the writer's stdout through.
fn run_writer(cmd: Command, n: u64, what: &str) {
    let o = run_ok(cmd, what);
    assert_eq!(String::from_utf8_lossy(&o.stdout), format!("done {n}\n"), "{what}: stdout\n{}", describe(&o));
}

/// Every file and directory under `dir`, relative to it.
fn listing(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
            let path = entry.expect("directory entry").path();
            out.push(path.strip_prefix(root).expect("under root").to_path_buf());
            if path.is_dir() && !path.is_symlink() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The highest `GLIBC_2.N` symbol version `file` needs, from `objdump -T`; None when objdump
/// is missing.
fn max_glibc_minor(file: &Path) -> Option<u32> {
    let o = Command::new("objdump").arg("-T").arg(file).output().ok()?;
    assert!(o.status.success(), "objdump -T {} failed\n{}", file.display(), describe(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let minors = text.split("GLIBC_2.").skip(1).filter_map(|rest| {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok()
    });
    Some(minors.max().unwrap_or(0))
}

/// `mlprof summary --json RUN` of the installed `mlprof`, found through `path`.
fn installed_summary(path: &str, dir: &Path, run_bin: &str) -> Value {
    let mut c = command("mlprof");
    c.env("PATH", path).current_dir(dir).args(["summary", "--json", run_bin]);
    let o = run_ok(c, "mlprof summary --json");
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("summary JSON: {e}\n{}", describe(&o)))
}

/// Asserts the exact counts of `writer PATH N`: open 1, write N (64 bytes each), close 1, no
/// drops, in the one process whose command line is `cmdline`.
fn assert_writer_counts(summary: &Value, cmdline: &str, n: u64) {
    assert_eq!(summary["dropped"].as_u64(), Some(0), "records dropped: {summary}");
    let procs: Vec<&Value> = summary["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter(|p| p["cmdline"].as_str() == Some(cmdline))
        .collect();
    assert_eq!(procs.len(), 1, "want one process {cmdline:?}: {summary}");
    let calls = Calls(&procs[0]["calls"]);
    for (func, count) in [("open", 1), ("write", n), ("close", 1)] {
        assert_eq!(calls.count(func), count, "{func} count of {cmdline:?}: {summary}");
        assert_eq!(calls.errors(func), 0, "{func} errors of {cmdline:?}: {summary}");
    }
    assert_eq!(calls.bytes("write"), 64 * n, "bytes written by {cmdline:?}: {summary}");
}

#[test]
fn wheel_install_run_uninstall() {
    const N: u64 = 250;
    let python = base_python();
    let dir = TempDir::new("wheel");
    let venv = dir.join("venv");
    match Command::new(&python).arg("--version").stdin(Stdio::null()).output() {
        Ok(o) if o.status.success() => {}
        _ => return skip(&format!("no {} to make a virtual environment with", python.display())),
    }
    let mut c = command(&python);
    c.args(["-m", "venv"]).arg(&venv);
    let o = output_with_timeout(c, default_timeout());
    if !o.status.success() {
        return skip(&format!("`{} -m venv` does not work here:\n{}", python.display(), describe(&o)));
    }
    let venv_python = venv.join("bin/python");

    // Build: the same PEP 517 hook as `pip install .`, once, with the workspace's target dir.
    let dist = dir.join("dist");
    let mut c = command(&venv_python);
    c.args(["-m", "pip", "wheel", "--no-deps", "--wheel-dir"])
        .arg(&dist)
        .arg(mlprof_tests::workspace_root())
        .env("CARGO_TARGET_DIR", target_dir())
        // pip's default (`--compatibility off`) tags the wheel linux_x86_64, a claim of nothing;
        // as for a published wheel, let maturin find the manylinux tag the binaries meet, and
        // check that claim below.
        .env("MATURIN_PEP517_ARGS", "--compatibility pypi");
    let started = Instant::now();
    let o = output_with_timeout(c, default_timeout().max(Duration::from_secs(1800)));
    let build_time = started.elapsed();
    if !o.status.success() {
        let stderr = String::from_utf8_lossy(&o.stderr);
        let offline = [
            "No matching distribution found for maturin",
            "Could not find a version that satisfies the requirement maturin",
            "Failed to establish a new connection",
            "Temporary failure in name resolution",
            "Network is unreachable",
        ];
        if let Some(line) = stderr.lines().find(|line| offline.iter().any(|m| line.contains(m))) {
            return skip(&format!("pip cannot get maturin from the package index ({})", line.trim()));
        }
        panic!("building the wheel failed\n{}", describe(&o));
    }
    let wheels: Vec<PathBuf> = std::fs::read_dir(&dist)
        .expect("wheel dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    assert_eq!(wheels.len(), 1, "want one wheel in {}: {wheels:?}", dist.display());
    let wheel = &wheels[0];
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    // The version is Cargo's, written once ([workspace.package]), like this crate's.
    let prefix = format!("mlprof-{}-py3-none-", env!("CARGO_PKG_VERSION"));
    assert!(name.starts_with(&prefix), "wheel {name} should start with {prefix}");
    let size = std::fs::metadata(wheel).expect("wheel size").len();
    say(&format!(
        "wheel: {name}, {:.2} MB, built in {:.0} s (target dir {})",
        size as f64 / 1e6,
        build_time.as_secs_f64(),
        target_dir().display()
    ));

    // Install into the fresh environment, from the file alone.
    let before = listing(&venv);
    let mut c = command(&venv_python);
    c.args(["-m", "pip", "install", "--no-index", "--no-deps"]).arg(wheel);
    run_ok(c, "pip install the wheel");
    let bin = venv.join("bin");
    for program in ["mlprof-collect", "mlprof"] {
        assert!(bin.join(program).is_file(), "{program} not installed in {}", bin.display());
    }
    let mut c = command(&venv_python);
    c.args(["-c", "import mlprof; print(mlprof.preload_path())"]);
    let o = run_ok(c, "mlprof.preload_path()");
    let package_lib = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    assert!(package_lib.starts_with(&venv), "{} is not in the environment", package_lib.display());

    // The platform tag claims a glibc (manylinux_2_N, possibly after an alias such as
    // manylinux2014_x86_64.); none of the three files may need a newer one.
    let tag = name.trim_end_matches(".whl").rsplit('-').next().unwrap_or("").to_string();
    let claimed: u32 = tag
        .split('.')
        .find_map(|t| t.strip_prefix("manylinux_2_")?.split('_').next()?.parse().ok())
        .unwrap_or_else(|| panic!("wheel {name}: want a manylinux_2_N platform tag, got {tag}"));
    for file in [bin.join("mlprof-collect"), bin.join("mlprof"), package_lib.clone()] {
        match max_glibc_minor(&file) {
            Some(needed) => assert!(
                needed <= claimed,
                "{} needs GLIBC_2.{needed} but the wheel claims {tag}",
                file.display()
            ),
            None => {
                skip("no objdump: the glibc versions behind the platform tag were not checked");
                break;
            }
        }
    }

    // Launcher mode, with the environment's bin/ and the system's as the whole PATH.
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    let work = dir.join("work");
    std::fs::create_dir(&work).expect("work dir");
    let prog = compile("writer", &dir);
    let out_file = work.join("w.dat").display().to_string();
    let mut c = command("mlprof-collect");
    c.env("PATH", &path).current_dir(&work).args([
        "--out",
        "run.bin",
        "--",
        &prog,
        &out_file,
        &N.to_string(),
        "0",
    ]);
    run_writer(c, N, "mlprof-collect --out run.bin -- writer");
    let launched = installed_summary(&path, &work, "run.bin");
    assert_writer_counts(&launched, &format!("{prog} {out_file} {N} 0"), N);

    // `python -m mlprof` is the same program.
    let mut c = command(&venv_python);
    c.current_dir(&work).args(["-m", "mlprof", "summary", "--json", "run.bin"]);
    let o = run_ok(c, "python -m mlprof summary --json");
    let via_python: Value = serde_json::from_slice(&o.stdout).expect("python -m mlprof JSON");
    assert_eq!(via_python, launched, "python -m mlprof summary differs from mlprof summary");

    // Capture ranges from the installed package: mlprof.start()/stop() and capture() mark two
    // ranges of tests/scripts/capture_api.py under --capture-range=itt (5 + 11 of its writes).
    let script = mlprof_tests::script("capture_api.py").display().to_string();
    let mut c = command("mlprof-collect");
    c.env("PATH", &path).current_dir(&work).args([
        "--out",
        "capture.bin",
        "--capture-range=itt",
        "--capture-range-end=repeat",
        "--",
    ]);
    c.arg(&venv_python).arg(&script);
    let o = run_ok(c, "mlprof-collect --capture-range=itt -- python capture_api.py");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "True True False", "start, stop, stop");
    let captured = installed_summary(&path, &work, "capture.bin");
    let writes: u64 = captured["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["cmdline"].as_str().unwrap_or("").contains("capture_api.py"))
        .map(|p| Calls(&p["calls"]).count("write"))
        .sum();
    assert_eq!(writes, 5 + 11, "writes inside mlprof.start()/stop() and capture()");
    assert_eq!(captured["ranges"].as_array().map(Vec::len), Some(2));

    // Attach mode: --print-preload names the package's library, and a program started with
    // LD_PRELOAD=$(mlprof-collect --print-preload), as the README shows, joins the session.
    let mut c = command("mlprof-collect");
    c.env("PATH", &path).arg("--print-preload");
    let o = run_ok(c, "mlprof-collect --print-preload");
    let printed = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(Path::new(&printed), package_lib.canonicalize().expect("library path"), "--print-preload");

    let session = mlprof_tests::unique_session("wheel");
    let mut collector = command("mlprof-collect");
    collector
        .env("PATH", &path)
        .current_dir(&work)
        .args(["--out", "attach.bin", "--session", &session])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = collector.spawn().expect("start the attach collector");
    let guard = Guard::new(child.id(), default_timeout());
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push(line);
        }
        all
    });
    let ready = format!("session '{session}' ready");
    let ready_line = loop {
        match rx.recv_timeout(default_timeout()) {
            Ok(line) if line.contains(&ready) => break line,
            Ok(_) => continue,
            Err(e) => {
                panic!("the attach collector did not print {ready:?} ({e}); status {:?}", child.try_wait())
            }
        }
    };
    assert!(
        ready_line.contains(&format!("LD_PRELOAD={printed}")),
        "ready line names the library: {ready_line}"
    );
    let attached_file = work.join("a.dat").display().to_string();
    let mut c = command("sh");
    c.env("PATH", &path)
        .env("MLPROF_SESSION", &session)
        .current_dir(&work)
        .args(["-c", r#"LD_PRELOAD=$(mlprof-collect --print-preload) "$0" "$@""#, &prog])
        .args([&attached_file, &N.to_string(), "0"]);
    run_writer(c, N, "LD_PRELOAD=$(mlprof-collect --print-preload) writer");
    // Safety: signalling our own child, not yet waited for.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().expect("wait for the attach collector");
    let lines = reader.join().expect("stderr reader");
    assert!(!guard.fired(), "the attach collector hung; stderr:\n{}", lines.join("\n"));
    assert!(status.success(), "attach collector exited {status:?}; stderr:\n{}", lines.join("\n"));
    let attached = installed_summary(&path, &work, "attach.bin");
    assert_writer_counts(&attached, &format!("{prog} {attached_file} {N} 0"), N);

    // Uninstall leaves the environment as it was before the install.
    let mut c = command(&venv_python);
    c.args(["-m", "pip", "uninstall", "--yes", "mlprof"]);
    run_ok(c, "pip uninstall mlprof");
    let after = listing(&venv);
    let left: Vec<_> = after.iter().filter(|p| !before.contains(p)).collect();
    assert!(left.is_empty(), "pip uninstall left {left:?} in {}", venv.display());
    let lost: Vec<_> = before.iter().filter(|p| !after.contains(p)).collect();
    assert!(lost.is_empty(), "install + uninstall removed {lost:?} from {}", venv.display());
}
