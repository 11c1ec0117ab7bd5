//! The reader against real interpreters: each CPython 3.10–3.13 found on this machine runs a
//! script that blocks at a known line of a known function, and its memory is read from here
//! with `process_vm_readv` through the same [`Memory`] trait, its symbols found in its ELF
//! symbol table and `/proc/PID/maps`. Only 3.11 is required (CI has it); the others run where
//! installed (`MLPROF_TEST_PYTHONS`, colon-separated, adds interpreters to try).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

use crate::code::{self, Types};
use crate::layout::{self, Layout};
use crate::memory::{Memory, read_process};
use crate::walk::{Entry, frames_and_entries_of, frames_of};
use crate::{Described, Frame};

const SCRIPT: &str = "import sys

def wait_here():
    print('ready', flush=True)
    sys.stdin.read()

class Outer:
    def method(self):
        wait_here()

Outer().method()
";

struct Remote(libc::pid_t);

impl Memory for Remote {
    fn read(&self, addr: usize, buf: &mut [u8]) -> Option<()> {
        read_process(self.0, addr, buf)
    }
}

/// Kills the interpreter when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Interpreters to try: `python3.1x` on the path, pyenv's, the test venv's, and any named.
fn candidates() -> Vec<String> {
    let mut found: Vec<String> = (10..=13).map(|m| format!("python3.{m}")).collect();
    let home = std::env::var("HOME").unwrap_or_default();
    if let Ok(versions) = std::fs::read_dir(format!("{home}/.pyenv/versions")) {
        for entry in versions.flatten() {
            found.push(format!("{}/bin/python3", entry.path().display()));
        }
    }
    found.push(format!("{home}/.cache/mlprof-venv/bin/python"));
    // Debian's, with libpython linked into the executable.
    found.push("/usr/bin/python3.11".into());
    found.extend(std::env::var("MLPROF_TEST_PYTHONS").unwrap_or_default().split(':').map(String::from));
    found.retain(|p| !p.is_empty());
    found
}

/// The (major, minor) of an interpreter that runs and the binary it is, or `None`.
fn version_of(python: &str) -> Option<((u8, u8), String)> {
    let out = Command::new(python)
        .args(["-c", "import os, sys; print(*sys.version_info[:2], os.path.realpath(sys.executable))"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let mut parts = text.split_whitespace();
    let mut number = || parts.next()?.parse::<u8>().ok();
    let version = (number()?, number()?);
    Some((version, parts.next()?.to_string()))
}

/// Symbol addresses of the object in `pid` that defines `_PyRuntime`: libpython, or the
/// executable where it is linked in.
fn symbols(pid: i32, names: &[&str]) -> Option<Vec<usize>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let mut objects: Vec<(usize, String)> = Vec::new();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() >= 6 && fields[2] == "00000000" && fields[5].starts_with('/') {
            let start = usize::from_str_radix(fields[0].split('-').next()?, 16).ok()?;
            objects.push((start, fields[5].to_string()));
        }
    }
    objects.sort_by_key(|(_, path)| !path.contains("libpython"));
    objects.iter().find_map(|(start, path)| {
        let elf = std::fs::read(path).ok()?;
        let (first_load, table) = dynamic_symbols(&elf)?;
        let bias = start - (first_load & !0xfff);
        names.iter().map(|name| table.iter().find(|(n, _)| n == name).map(|&(_, v)| bias + v)).collect()
    })
}

/// The first `PT_LOAD`'s address and the `.dynsym` table (name, value) of an ELF64 file.
fn dynamic_symbols(elf: &[u8]) -> Option<(usize, Vec<(String, usize)>)> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?) as usize);
    let u32_at = |at: usize| Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?) as usize);
    let u64_at = |at: usize| Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?) as usize);
    if elf.get(..5)? != b"\x7fELF\x02" {
        return None;
    }
    let (phoff, phsize, phnum) = (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?);
    let first_load = (0..phnum).map(|i| phoff + i * phsize).find(|&ph| u32_at(ph) == Some(1))?;
    let first_load = u64_at(first_load + 0x10)?;
    let (shoff, shsize, shnum) = (u64_at(0x28)?, u16_at(0x3a)?, u16_at(0x3c)?);
    let section = |i: usize| shoff + i * shsize;
    let dynsym = (0..shnum).map(section).find(|&sh| u32_at(sh + 4) == Some(11))?;
    let strtab = section(u32_at(dynsym + 0x28)?);
    let (strings, syms, size) = (u64_at(strtab + 0x18)?, u64_at(dynsym + 0x18)?, u64_at(dynsym + 0x20)?);
    let mut table = Vec::new();
    for sym in (syms..syms + size).step_by(24) {
        let name_at = strings + u32_at(sym)?;
        let len = elf.get(name_at..)?.iter().position(|&b| b == 0)?;
        let name = String::from_utf8_lossy(&elf[name_at..name_at + len]).into_owned();
        table.push((name, u64_at(sym + 8)?));
    }
    Some((first_load, table))
}

/// The frames and their descriptions of the interpreter's main thread, once it sleeps.
fn read_live(python: &str, minor: u8, script: &str) -> Vec<(String, String, u32)> {
    let child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("interpreter starts");
    let mut running = Running(child);
    let mut ready = String::new();
    BufReader::new(running.0.stdout.as_mut().unwrap()).read_line(&mut ready).unwrap();
    assert_eq!(ready, "ready\n");
    let pid = running.0.id() as i32;
    // Ready is printed just before the read: wait (on the kernel's word, not a guess) until
    // the thread blocks in it.
    for _ in 0..500 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        if stat.rsplit(')').next().unwrap().trim_start().starts_with('S') {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let names = ["_PyRuntime", "PyCode_Type", "PyUnicode_Type", "PyBytes_Type"];
    let found = symbols(pid, &names).unwrap_or_else(|| panic!("3.{minor}: symbols of {python}"));
    let [runtime, code, unicode, bytes] = found[..] else { unreachable!() };
    let remote = Remote(pid);
    let mut layout: Layout = layout::for_version(3, minor).unwrap();
    if minor >= 13 {
        let own = layout::from_debug_offsets(&remote, runtime).expect("3.13 debug offsets");
        assert_eq!(own, layout, "3.13: the table agrees with the interpreter's own offsets");
        layout = own;
    }
    let interp = remote.pointer(runtime + layout.runtime_interpreters as usize).expect("an interpreter");
    let tstate = remote.pointer(interp + layout.interp_threads as usize).expect("a thread");
    let mut frames = [Frame::default(); 8];
    let walked = frames_of(&remote, &layout, code, tstate, &mut frames);
    assert!(!walked.broken, "3.{minor}: {walked:?}");
    // From outside, as the collector's sampler reads it: the thread found by its kernel tid
    // (the main thread's is the pid), the same frames, and where the evaluation loop was
    // entered from C: 3.11+ run the module and the calls it makes in one activation, entered
    // at `<module>`; 3.10 enters it at every frame.
    if layout.tstate_native_thread_id != layout::NONE {
        let tid = remote.u64(tstate + layout.tstate_native_thread_id as usize);
        assert_eq!(tid, Some(pid as u64), "3.{minor}: native_thread_id");
    }
    let (mut again, mut entries) = ([Frame::default(); 8], [Entry::default(); 8]);
    let is_code = |at: usize| remote.u64(at + layout::OB_TYPE) == Some(code as u64);
    let (walked_again, cframe) =
        frames_and_entries_of(&remote, &layout, &is_code, tstate, &mut again, &mut entries);
    assert_eq!((walked_again, again), (walked, frames), "3.{minor}");
    let outermost: Vec<bool> = entries[..walked.count].iter().map(|e| e.outermost).collect();
    let expected_entries = if minor >= 11 { [false, false, true] } else { [true; 3] };
    assert_eq!(outermost, expected_entries, "3.{minor}: entries");
    // 3.11 and 3.12: the innermost activation's _PyCFrame, on the C stack, holds its innermost
    // frame; its `previous` is the thread state's root one, which holds none.
    if layout.cframe_previous != layout::NONE {
        let current = remote.u64(cframe + layout.cframe_current as usize);
        assert_eq!(current, Some(entries[0].address as u64), "3.{minor}: the _PyCFrame's current frame");
        let root = remote.pointer(cframe + layout.cframe_previous as usize).expect("the root _PyCFrame");
        assert_eq!(remote.u64(root + layout.cframe_previous as usize), Some(0), "3.{minor}: root");
    } else {
        assert_eq!(cframe, 0, "3.{minor}: no _PyCFrame");
    }
    let types = Types { code, unicode, bytes };
    let described = frames[..walked.count].iter().map(|frame| {
        let (mut file, mut func) = ([0u8; 256], [0u8; 256]);
        let Described { file_len, func_len, line } =
            code::describe(&remote, &layout, &types, frame.code, frame.offset, &mut file, &mut func)
                .unwrap_or_else(|| panic!("3.{minor}: {frame:?} described"));
        let text = |buf: &[u8], len: usize| String::from_utf8(buf[..len].to_vec()).unwrap();
        (text(&file, file_len), text(&func, func_len), line)
    });
    let described = described.collect();
    let _ = running.0.stdin.as_mut().unwrap().write_all(b"");
    described
}

#[test]
fn live_interpreters_decode_to_the_line_they_block_on() {
    let (mut seen, mut binaries) = (Vec::new(), Vec::new());
    for python in candidates() {
        let Some(((3, minor @ 10..=13), binary)) = version_of(&python) else { continue };
        if binaries.contains(&binary) {
            continue;
        }
        binaries.push(binary.clone());
        seen.push(minor);
        // A file whose name is not ASCII (a 2-byte-per-character string in the interpreter).
        let dir = std::env::temp_dir().join(format!("mlprof-python-{}-3.{minor}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("données_λ.py");
        std::fs::write(&script, SCRIPT).unwrap();
        let path = script.to_str().unwrap().to_string();
        let frames = read_live(&python, minor, &path);
        let _ = std::fs::remove_dir_all(&dir);
        // 3.10's code objects have no qualified name.
        let (method, module) =
            if minor >= 11 { ("Outer.method", "<module>") } else { ("method", "<module>") };
        let expected: Vec<(String, String, u32)> = [("wait_here", 5), (method, 9), (module, 11)]
            .iter()
            .map(|&(f, l)| (path.clone(), f.into(), l))
            .collect();
        assert_eq!(frames, expected, "3.{minor} ({python})");
        eprintln!("live check passed: 3.{minor} at {python} ({binary})");
    }
    assert!(seen.contains(&11), "a CPython 3.11 to check against (found {seen:?})");
}
