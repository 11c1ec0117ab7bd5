//! The in-process path end to end, as a hook would run it: a CPython 3.11 embedded in this
//! test process (loaded `RTLD_LOCAL`, as an embedding application may, so [`discover`] must
//! find it by its handle), Python code calling into C with the GIL released (a ctypes
//! function, like a blocking read), and [`frames`] and [`describe`] run there, on the thread
//! that owns the frames. One interpreter a process: everything happens in this one test.

use std::ffi::{CString, c_char, c_int};
use std::process::Command;
use std::sync::Mutex;

use crate::python::{Frame, Status, describe, discover, frames, identity};

type Seen = Vec<(String, String, u32, bool)>;
static SEEN: Mutex<Seen> = Mutex::new(Vec::new());

/// What the "hook" records: the site of the call it is in.
extern "C" fn probe() -> c_int {
    let mut out = [Frame::default(); 4];
    let count = frames(&mut out);
    // What --sites=1 costs a recorded call here (printed, not asserted: a shared machine's
    // timings are no test).
    let (calls, start) = (200_000u32, std::time::Instant::now());
    for _ in 0..calls {
        std::hint::black_box(frames(std::hint::black_box(&mut [Frame::default(); 1])));
    }
    let each = start.elapsed().as_nanos() as f64 / f64::from(calls);
    eprintln!("frames(1) from a C call under Python 3.11: {each:.1} ns a call");
    let mut seen = SEEN.lock().unwrap();
    for frame in &out[..count] {
        let (mut file, mut func) = ([0u8; 128], [0u8; 128]);
        let Some(d) = describe(*frame, &mut file, &mut func) else { continue };
        let text = |buf: &[u8], len: usize| String::from_utf8_lossy(&buf[..len]).into_owned();
        seen.push((text(&file, d.file_len), text(&func, d.func_len), d.line, identity(frame.code) != 0));
    }
    count as c_int
}

/// libpython3.11's directory and prefix, from an interpreter that has a shared one.
fn libpython() -> Option<(String, String)> {
    let home = std::env::var("HOME").unwrap_or_default();
    for python in ["python3.11".to_string(), format!("{home}/.cache/mlprof-venv/bin/python")] {
        let Ok(out) = Command::new(&python)
            .args(["-c", "import sys, sysconfig; print(sysconfig.get_config_var('LIBDIR'), sys.base_prefix)"])
            .output()
        else {
            continue;
        };
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut parts = text.split_whitespace();
        let (Some(dir), Some(prefix)) = (parts.next(), parts.next()) else { continue };
        let lib = format!("{dir}/libpython3.11.so.1.0");
        if std::path::Path::new(&lib).exists() {
            return Some((lib, prefix.to_string()));
        }
    }
    None
}

#[test]
fn an_embedded_interpreter_is_found_and_read_from_inside_a_c_call() {
    let Some((lib, prefix)) = libpython() else {
        eprintln!("skipped: no shared libpython3.11 here");
        return;
    };
    assert_eq!(discover(), Status::NotFound, "nothing loaded yet");
    let name = CString::new(lib).unwrap();
    // Safety: loading a library; its constructors only set up the runtime's statics.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null());
    let symbol = |name: &str| {
        let name = CString::new(name).unwrap();
        // Safety: a live handle and a NUL-terminated name.
        let addr = unsafe { libc::dlsym(handle, name.as_ptr()) };
        assert!(!addr.is_null());
        addr
    };
    // The prefix as a wide string, kept alive for the interpreter's lifetime (leaked).
    let wide: &'static [i32] = prefix.chars().map(|c| c as i32).chain([0]).collect::<Vec<_>>().leak();
    let code = format!(
        "import ctypes\n\
         def probe_here():\n    return ctypes.CFUNCTYPE(ctypes.c_int)({})()\n\
         class Sampler:\n    def run(self):\n        return probe_here()\n\
         Sampler().run()\n",
        probe as extern "C" fn() -> c_int as usize
    );
    let code = CString::new(code).unwrap();
    // Safety: the documented embedding sequence with the C signatures of 3.11's API.
    unsafe {
        let set_home: extern "C" fn(*const i32) = std::mem::transmute(symbol("Py_SetPythonHome"));
        let initialize: extern "C" fn(c_int) = std::mem::transmute(symbol("Py_InitializeEx"));
        let run: extern "C" fn(*const c_char) -> c_int = std::mem::transmute(symbol("PyRun_SimpleString"));
        assert_eq!(discover(), Status::Ready { major: 3, minor: 11 }, "found by its handle");
        // Extension modules (ctypes) look for the interpreter's symbols globally: make it so.
        let global = libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_GLOBAL);
        assert!(!global.is_null());
        set_home(wide.as_ptr());
        initialize(0);
        assert_eq!(run(code.as_ptr()), 0);
    }
    let seen = SEEN.lock().unwrap().clone();
    let expected: Seen = [("probe_here", 3), ("Sampler.run", 6), ("<module>", 7)]
        .iter()
        .map(|&(func, line)| ("<string>".to_string(), func.to_string(), line, true))
        .collect();
    assert_eq!(seen, expected);
    // A thread Python never saw has no frames.
    let other = std::thread::spawn(|| frames(&mut [Frame::default(); 2])).join().unwrap();
    assert_eq!(other, 0);
}
