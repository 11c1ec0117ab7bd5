//! Call sites in more places (issue 36): a `glob` loop, `torch.save`/`torch.load` named back to
//! the script's lines with `--sites=8`, an interpreter image that `exec` made, and an
//! application that embeds CPython (its C code's calls get their native caller).

use mlprof_tests::*;
use serde_json::Value;

/// The line of the `# site: NAME` mark in `script`.
fn mark(script: &std::path::Path, name: &str) -> u64 {
    let source = std::fs::read_to_string(script).unwrap();
    let at = source.lines().position(|l| l.ends_with(&format!("# site: {name}")));
    at.unwrap_or_else(|| panic!("no mark {name}")) as u64 + 1
}

/// All calls named `call` of the sites at `file:line` whose innermost line is there, or, with
/// `through`, whose callers include `file:line`.
fn count(sites: &[Value], file: &str, line: u64, call: &str, through: bool) -> u64 {
    let here = |s: &Value| s["file"] == file && s["line"] == line;
    sites
        .iter()
        .filter(|s| {
            if through {
                s["callers"].as_array().is_some_and(|callers| callers.iter().any(here))
            } else {
                here(s)
            }
        })
        .filter_map(|s| s["calls"][call]["count"].as_u64())
        .sum()
}

#[test]
fn glob_checkpoints_and_an_exec_name_their_lines() {
    if !require_python_modules(&["torch"]) {
        return;
    }
    const N: u64 = 4;
    let dir = TempDir::new("sites-more");
    let script = script("sites_more.py");
    let out = dir.join("run.bin");
    let cmd = [python().display().to_string(), script.display().to_string(), dir.str(), N.to_string()];
    let o = run_collect(&out, &["--sites=8"], &cmd);
    assert!(o.status.success(), "sites_more.py failed\n{}", describe(&o));
    let summary = clean_summary(&out);
    let sites = summary.json["sites"].as_array().cloned().unwrap_or_default();
    let file = script.display().to_string();
    let mut e = summary.expect();
    let stats = |name: &str| count(&sites, &file, mark(&script, name), "stat64", false);
    e.that(format_args!("glob loop: {} stat64, want {N}", stats("glob")), stats("glob") == N);
    e.that(format_args!("after the exec: {} stat64, want {N}", stats("exec")), stats("exec") == N);
    // torch.save opens its file in C++ (fopen) under torch/serialization.py; --sites=8 reaches
    // back to the script's line. torch.load opens it from Python's open.
    let (save, load) = (mark(&script, "save"), mark(&script, "load"));
    for (what, line, call) in [("save", save, "fopen64"), ("save", save, "fclose"), ("load", load, "open64")]
    {
        let got = count(&sites, &file, line, call, true);
        e.that(format_args!("{call} called from the {what} line: {got}, want {N}"), got == N);
    }
    let checkpoint = summary.json["files"]
        .as_array()
        .and_then(|files| files.iter().find(|f| f["path"].as_str().is_some_and(|p| p.ends_with("ckpt.pt"))));
    let opens = checkpoint.and_then(|f| f["opens"].as_u64());
    e.that(format_args!("the checkpoint's opens {opens:?}: one per save and per load"), opens == Some(2 * N));
    e.finish();
}

/// An application linked to libpython runs a script given as a string: the interpreter's calls
/// name its lines (file `<embedded>`), the C code's own calls its native caller.
#[test]
fn an_embedded_interpreter_names_its_lines() {
    const N: u64 = 6;
    let py = python();
    let config = std::process::Command::new(&py)
        .args(["-c", "import sysconfig as s; print(s.get_config_var('INCLUDEPY')); print(s.get_config_var('LIBDIR')); print(s.get_config_var('LDVERSION')); print(s.get_config_var('Py_ENABLE_SHARED'))"])
        .output()
        .unwrap();
    let config = String::from_utf8_lossy(&config.stdout).to_string();
    let lines: Vec<&str> = config.lines().collect();
    let [include, libdir, version, shared] = lines[..] else {
        panic!("sysconfig of {}: {config}", py.display())
    };
    if shared != "1" {
        skip(format!("{} has no shared libpython to embed", py.display()));
        return;
    }
    let dir = TempDir::new("sites-embed");
    let program = dir.join("embed_python").display().to_string();
    let src = tests_dir().join("programs/embed_python.c").display().to_string();
    let (include, libdir_flag, rpath, lib) = (
        format!("-I{include}"),
        format!("-L{libdir}"),
        format!("-Wl,-rpath,{libdir}"),
        format!("-lpython{version}"),
    );
    gcc(&["-O1", "-o", &program, &src, &include, &libdir_flag, &rpath, &lib]);
    let out = dir.join("run.bin");
    let o = run_collect(&out, &["--sites"], &[program.as_str(), &N.to_string()]);
    assert!(o.status.success(), "embed_python failed\n{}", describe(&o));
    let summary = clean_summary(&out);
    let sites = summary.json["sites"].as_array().cloned().unwrap_or_default();
    let mut e = summary.expect();
    let at = |line: u64, function: &str| {
        sites
            .iter()
            .find(|s| s["file"] == "<embedded>" && s["line"] == line && s["function"] == function)
            .and_then(|s| s["calls"]["stat64"]["count"].as_u64())
    };
    e.that(
        format_args!("<embedded>:3 <module>: {:?}, want {N}", at(3, "<module>")),
        at(3, "<module>") == Some(N),
    );
    e.that(
        format_args!("<embedded>:5 touch: {:?}, want {}", at(5, "touch"), N + 1),
        at(5, "touch") == Some(N + 1),
    );
    let program_path = std::fs::canonicalize(&program).unwrap().display().to_string();
    let main = sites
        .iter()
        .find(|s| s["native"] == true && s["file"] == program_path.as_str() && s["function"] == "main");
    // Python.h asks for 64-bit offsets: open is open64.
    let opens = main.and_then(|s| s["calls"]["open64"]["count"].as_u64());
    e.that(format_args!("main's own open, a native site: {opens:?}"), opens == Some(1));
    e.finish();
}
