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
