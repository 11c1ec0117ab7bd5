//! Compiling C: the programs in `tests/programs/` and whatever else a test builds with gcc.

use std::ffi::OsStr;
use std::process::{Command, Stdio};

use crate::locations::tests_dir;
use crate::tmp::TempDir;

/// Runs gcc with `args`; fails the test with gcc's messages if it fails.
pub fn gcc<S: AsRef<OsStr>>(args: &[S]) {
    let o = Command::new("gcc")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run gcc: {e}"));
    let shown: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
    assert!(o.status.success(), "gcc {shown:?} failed:\n{}", String::from_utf8_lossy(&o.stderr));
}

/// Compiles `tests/programs/<name>.c` into `dir/<name>` and returns its path.
pub fn compile(name: &str, dir: &TempDir) -> String {
    let src = tests_dir().join("programs").join(format!("{name}.c"));
    let out = dir.join(name).display().to_string();
    let src = src.display().to_string();
    gcc(&["-O1", "-pthread", "-U_FORTIFY_SOURCE", "-Wall", "-o", &out, &src]);
    out
}

/// The doubles and the timeline program, built in `dir`: libcuda.so.1, libcupti.so.13 (soname
/// as the wheel's), and `gpu_timeline`, linked against both unless `link_cupti` is false.
pub fn gpu_timeline_program(dir: &TempDir, link_cupti: bool) -> String {
    let doubles = tests_dir().join("doubles");
    let cuda = dir.join("libcuda.so.1").display().to_string();
    gcc(&[
        "-O1",
        "-shared",
        "-fPIC",
        "-o",
        &cuda,
        &doubles.join("libcuda_double.c").display().to_string(),
        "-ldl",
    ]);
    let cupti = dir.join("libcupti.so.13").display().to_string();
    let cupti_src = doubles.join("libcupti_double.c").display().to_string();
    gcc(&["-O1", "-shared", "-fPIC", "-Wl,-soname,libcupti.so.13", "-o", &cupti, &cupti_src]);
    let main = dir.join("gpu_timeline").display().to_string();
    let src = tests_dir().join("programs").join("gpu_timeline.c").display().to_string();
    let (libdir, rpath) = (format!("-L{}", dir.str()), format!("-Wl,-rpath,{}", dir.str()));
    let mut args = vec!["-O1", "-o", &main, &src, &libdir, "-l:libcuda.so.1", &rpath];
    if link_cupti {
        // The program calls nothing of CUPTI's: keep it needed, as an application that uses
        // CUPTI itself would.
        args.extend(["-Wl,--no-as-needed", "-l:libcupti.so.13"]);
    }
    gcc(&args);
    main
}

/// The ittnotify C sources that the ittapi-sys crate (a dependency of the preload) ships.
pub fn ittnotify_sources() -> std::path::PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let registry = home.join("registry").join("src");
    let mut found: Vec<_> = std::fs::read_dir(&registry)
        .unwrap_or_else(|e| panic!("{}: {e}", registry.display()))
        .flatten()
        .flat_map(|index| std::fs::read_dir(index.path()).into_iter().flatten().flatten())
        .filter(|k| k.file_name().to_string_lossy().starts_with("ittapi-sys-"))
        .map(|k| k.path().join("c-library"))
        .filter(|p| p.is_dir())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| panic!("no ittapi-sys sources under {} (cargo fetch)", registry.display()))
}

/// Builds `tests/programs/hot_lib.c` (libhot_tasks.so: two hot functions, -O2
/// -fomit-frame-pointer, for `--sample`) and the C program `hot_tasks.c` that calls them inside
/// ITT tasks, in `dir`: (library, program).
pub fn hot_tasks_program(dir: &TempDir) -> (String, String) {
    let lib = dir.join("libhot_tasks.so").display().to_string();
    let lib_src = tests_dir().join("programs/hot_lib.c").display().to_string();
    gcc(&["-O2", "-fomit-frame-pointer", "-shared", "-fPIC", "-o", &lib, &lib_src]);
    let itt = ittnotify_sources();
    let program = dir.join("hot_tasks").display().to_string();
    let (include, src_include) = (
        format!("-I{}", itt.join("include").display()),
        format!("-I{}", itt.join("src/ittnotify").display()),
    );
    let src = tests_dir().join("programs/hot_tasks.c").display().to_string();
    let static_part = itt.join("src/ittnotify/ittnotify_static.c").display().to_string();
    let (libdir, rpath) = (format!("-L{}", dir.str()), format!("-Wl,-rpath,{}", dir.str()));
    gcc(&[
        "-O2",
        "-fomit-frame-pointer",
        "-pthread",
        &include,
        &src_include,
        "-o",
        &program,
        &src,
        &static_part,
        &libdir,
        "-lhot_tasks",
        &rpath,
        "-ldl",
    ]);
    (lib, program)
}
