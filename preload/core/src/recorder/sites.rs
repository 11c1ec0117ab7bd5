//! Call sites (`mlprof-collect --sites`, `MLPROF_SITES=1`): each recorded call made while its
//! thread runs Python carries the number of its innermost Python line ([`mlprof_format::site`]).
//!
//! A process numbers its sites itself: a fixed, lock-free table maps (code object, instruction
//! offset) to the number, so a call from a line met before costs the frame reads and one probe;
//! the first call from a line names it ([`crate::python::describe`]), sends its file and function
//! strings once, and defines the number with a `KIND_SITE_DEF` record before the call's own.
//! Entries are keyed by process and collector epoch too: a fork child, or a process that joined
//! a new collector, defines its sites again (the collector maps each process's numbers to
//! run-wide sites).
//!
//! A thread that runs no Python gets its native caller instead ([`crate::caller`]): keyed by
//! the return address, named by module and address in it.
//!
//! Failure behaviour: no Python on the thread and no native caller found, a frame that does not look like one, a full
//! table or a full lane → the call has no site (not counted yet); nothing here faults on a bad
//! pointer (the reader checks before it follows one) or changes what the call returns.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use mlprof_format::record::Event;
use mlprof_format::ring::RingView;
use mlprof_format::site::{KIND_SITE_DEF, SITE_NATIVE};

use super::{lane, session};
use crate::guard::ThreadState;
use crate::{caller, python};

/// Slots a process may use per frame a site holds (`--sites=N` uses N times as many: each
/// distinct chain of callers is a slot per frame, and an import of PyTorch alone walks tens of
/// thousands of distinct chains through importlib with N = 8).
const SLOTS_PER_FRAME: usize = 1 << 14;
/// The table: room for [`MAX_FRAMES`] frames (a power of two). Zero-initialized, so only the
/// pages of the slots a process uses take memory (`SLOTS_PER_FRAME × N`, rounded up to a power
/// of two, slots of 40 bytes are probed).
const TABLE_SLOTS: usize = SLOTS_PER_FRAME * MAX_FRAMES;
const MAX_PROBES: usize = 32;

/// One (code object, offset) of one process in one collector epoch, and its number.
struct Slot {
    /// The code object's address (0: a free slot).
    code: AtomicU64,
    /// `offset << 32 | pid`.
    offset_pid: AtomicU64,
    /// What tells the code object at `code` is still the one named ([`python::identity`]): an
    /// address can be reused once a code object is freed.
    identity: AtomicU64,
    /// `epoch << 32 | number` (number 0: being defined).
    epoch_number: AtomicU64,
    /// The number of the site whose function called this one's (`--sites=N`; 0: none).
    parent: AtomicU64,
}

static TABLE: [Slot; TABLE_SLOTS] = [const {
    Slot {
        code: AtomicU64::new(0),
        offset_pid: AtomicU64::new(0),
        identity: AtomicU64::new(0),
        epoch_number: AtomicU64::new(0),
        parent: AtomicU64::new(0),
    }
}; TABLE_SLOTS];

/// The next number a process gives a site (a fork child goes on from its parent's: numbers
/// only need to be distinct within a process).
static NEXT_NUMBER: AtomicU32 = AtomicU32::new(1);

static ENABLED: AtomicBool = AtomicBool::new(false);
/// Frames a call's site holds (`MLPROF_SITES=N`, 1 to [`MAX_FRAMES`]): the innermost line and
/// the lines that called its function, each a site of its own whose parent is its caller's.
static FRAMES: AtomicU32 = AtomicU32::new(1);
/// The part of the table in use, as a mask (set with [`FRAMES`]): `SLOTS_PER_FRAME × N`
/// rounded up to a power of two, so that a mask, not a division, picks a slot (a division cost
/// a hooked call ~10 ns).
static SLOT_MASK: AtomicUsize = AtomicUsize::new(SLOTS_PER_FRAME - 1);
/// The most frames a site holds.
pub const MAX_FRAMES: usize = 8;

/// Reads `MLPROF_SITES` (at join time).
pub fn configure() {
    let value = crate::config::getenv(c"MLPROF_SITES");
    let on = value.is_some_and(|v| !matches!(v, b"" | b"0" | b"off" | b"no"));
    // A number of frames, else 1 (`on`, `yes`); at most MAX_FRAMES.
    let number = value.and_then(|v| {
        v.iter().try_fold(0u32, |n, d| d.is_ascii_digit().then(|| n.saturating_mul(10) + u32::from(d - b'0')))
    });
    let frames = number.unwrap_or(1).clamp(1, MAX_FRAMES as u32);
    FRAMES.store(frames, Ordering::Relaxed);
    SLOT_MASK.store(SLOTS_PER_FRAME * (frames as usize).next_power_of_two() - 1, Ordering::Relaxed);
    if on {
        // Where our own code lies and glibc's module lookup, for native callers.
        caller::configure();
    }
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether calls carry sites (one relaxed load on every recorded call).
#[inline(always)]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The site number of the calling thread's innermost Python line (with `--sites=N`, of the
/// chain of its N innermost lines), defined on `lane` first when new; 0 when the thread runs no
/// Python. With the guard held (`in_hook`).
#[inline]
pub(super) fn current(ring: &RingView, lane: u32, state: &ThreadState) -> u32 {
    let depth = FRAMES.load(Ordering::Relaxed) as usize;
    if depth > 1 {
        let mut frames = [python::Frame::default(); MAX_FRAMES];
        numbered(frames.get_mut(..depth).unwrap_or_default(), ring, lane, state)
    } else {
        // One frame, the usual case: no larger buffer to clear on every call.
        numbered(&mut [python::Frame::default()], ring, lane, state)
    }
}

/// The innermost frames into `frames`, numbered from the outermost in (each frame's site has
/// its caller's as parent); the innermost's number.
#[inline(always)]
fn numbered(frames: &mut [python::Frame], ring: &RingView, lane: u32, state: &ThreadState) -> u32 {
    let found = python::frames(frames);
    if found == 0 {
        look_for_python(state);
        // No Python on this thread: the native code that called the hook.
        return match caller::address() {
            0 => 0,
            address => number_of(python::Frame { code: address, offset: NATIVE }, 0, ring, lane, state),
        };
    }
    let mut parent = 0;
    for frame in frames.get(..found).unwrap_or_default().iter().rev() {
        // A frame that gets no number (a full table, a code object that cannot be read) cuts
        // the chain: the frames inside it start a shorter one, so the call keeps its line.
        parent = number_of(*frame, parent, ring, lane, state);
    }
    parent
}

/// The number of `frame` called from site `parent` (0: none), defined on `lane` when new.
#[inline]
fn number_of(frame: python::Frame, parent: u32, ring: &RingView, lane: u32, state: &ThreadState) -> u32 {
    let (pid, epoch) = (session::pid(), session::epoch());
    let offset_pid = (u64::from(frame.offset) << 32) | u64::from(pid);
    let mask = SLOT_MASK.load(Ordering::Relaxed);
    let start = hash(frame.code, offset_pid ^ u64::from(parent).rotate_left(40));
    for probe in 0..MAX_PROBES {
        let Some(slot) = TABLE.get(start.wrapping_add(probe) & mask) else { break };
        let code = slot.code.load(Ordering::Acquire);
        if code == 0 {
            return define(slot, (frame, parent), offset_pid, ring, lane, state);
        }
        if code == frame.code as u64
            && slot.offset_pid.load(Ordering::Acquire) == offset_pid
            && slot.parent.load(Ordering::Acquire) == u64::from(parent)
        {
            let epoch_number = slot.epoch_number.load(Ordering::Acquire);
            let number = epoch_number as u32;
            if number != 0
                && (epoch_number >> 32) as u32 == epoch
                && slot.identity.load(Ordering::Relaxed) == identity(frame)
            {
                return number;
            }
            // Another epoch, a reused address, or a definition under way: define it again.
            return redefine(slot, (frame, parent), ring, lane, state);
        }
    }
    0
}

/// The `offset` of a native caller's key: its `code` is the return address (bytecode offsets
/// are far below this).
const NATIVE: u32 = u32::MAX;

/// What tells a key's code object is still the one named; a native caller's address needs
/// nothing (its module stays mapped while code in it calls).
#[inline]
fn identity(frame: python::Frame) -> u64 {
    if frame.offset == NATIVE { 0 } else { python::identity(frame.code) }
}

/// A thread's recorded calls, while no interpreter is found, before it looks for one again.
const CALLS_BETWEEN_LOOKS: u32 = 1 << 16;

/// Looks for the interpreter (through the loader: `dlsym`, `dlopen(RTLD_NOLOAD)`) on a
/// thread's first call without frames, then once every [`CALLS_BETWEEN_LOOKS`] such calls of
/// that thread while none is found (an embedding application may load Python late); never
/// again once one is found or known unreadable. With the guard held: the loader's calls pass
/// through our hooks.
#[inline]
fn look_for_python(state: &ThreadState) {
    if !matches!(python::status(), python::Status::NotFound) {
        return;
    }
    let left = state.site_looks.get();
    state.site_looks.set(left.checked_sub(1).unwrap_or(CALLS_BETWEEN_LOOKS));
    if left == 0 {
        crate::guard::keeping_errno(python::discover);
    }
}

/// Where a key's probe starts (masked by the caller). Every bit of the key must count: a
/// product's bit i depends only on the bits up to i of what was multiplied, and the slot is
/// taken from bits 32 and up of the product, so the key's high half is folded into its low
/// half first. (Without the fold, the instruction offset, in bits 49 and up, counted for
/// nothing: every line of a function began its probe at the same slot, a function with more
/// than [`MAX_PROBES`] call lines lost the sites of the rest, and a function whose slot fell
/// behind such a run lost all of its own, by the luck of where the allocator put its code.)
#[inline(always)]
fn hash(code: usize, offset_pid: u64) -> usize {
    let key = code as u64 ^ offset_pid.rotate_left(17);
    let mixed = (key ^ (key >> 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> 32) as usize
}

/// Claims a free slot for `frame` and defines its site (a thread that loses the race for the
/// slot probes on next time; this call goes without a site).
#[cold]
fn define(
    slot: &Slot,
    (frame, parent): (python::Frame, u32),
    offset_pid: u64,
    ring: &RingView,
    lane: u32,
    state: &ThreadState,
) -> u32 {
    if slot.code.compare_exchange(0, frame.code as u64, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return 0;
    }
    slot.parent.store(u64::from(parent), Ordering::Release);
    slot.offset_pid.store(offset_pid, Ordering::Release);
    redefine(slot, (frame, parent), ring, lane, state)
}

/// Names `frame`'s site on the lane under a new number and stores it in `slot` (claimed); errno
/// kept (the reads that cannot fault are system calls).
#[cold]
fn redefine(slot: &Slot, site: (python::Frame, u32), ring: &RingView, lane: u32, state: &ThreadState) -> u32 {
    crate::guard::keeping_errno(|| redefine_now(slot, site, ring, lane, state))
}

/// A site named: its strings' lengths in the buffers, its line, and for a native caller its
/// address in its module.
struct Named {
    file_len: usize,
    func_len: usize,
    line: u32,
    native_address: Option<u64>,
}

fn redefine_now(
    slot: &Slot,
    (frame, parent): (python::Frame, u32),
    ring: &RingView,
    lane: u32,
    state: &ThreadState,
) -> u32 {
    let (mut file, mut function) = ([0u8; 1024], [0u8; 256]);
    let described = if frame.offset == NATIVE {
        // The module and the address in it; the collector names the function.
        caller::describe(frame.code, &mut file).map(|named| Named {
            file_len: named.path_len,
            func_len: 0,
            line: 0,
            native_address: Some(named.module_address),
        })
    } else {
        python::describe(frame, &mut file, &mut function).map(|described| Named {
            file_len: described.file_len,
            func_len: described.func_len,
            line: described.line,
            native_address: None,
        })
    };
    let Some(described) = described else {
        return 0;
    };
    let (pid, tid) = (session::pid(), state.tid.get());
    let file = file.get(..described.file_len).unwrap_or_default();
    let function = function.get(..described.func_len).unwrap_or_default();
    let file_id = mlprof_format::string_id(file);
    // A native caller's function is named by the collector (0: not known here).
    let function_id = if function.is_empty() { 0 } else { mlprof_format::string_id(function) };
    let number = NEXT_NUMBER.fetch_add(1, Ordering::Relaxed);
    let definition = Event {
        kind: KIND_SITE_DEF,
        pid,
        tid,
        fd: number as i32,
        arg: file_id,
        arg2: function_id,
        extra: described.line,
        start: u64::from(parent),
        ret: described.native_address.unwrap_or(0) as i64,
        flags: if described.native_address.is_some() { SITE_NATIVE } else { 0 },
        ..Event::default()
    };
    let sent = lane::send_string(ring, lane, pid, tid, file_id, file)
        && (function.is_empty() || lane::send_string(ring, lane, pid, tid, function_id, function))
        && ring.push(lane, &definition);
    if !sent {
        return 0;
    }
    slot.identity.store(identity(frame), Ordering::Relaxed);
    slot.epoch_number.store((u64::from(session::epoch()) << 32) | u64::from(number), Ordering::Release);
    number
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of `offset` in the code object at `code`, of process `pid`, as `number_of`
    /// hashes it (no parent).
    fn start(code: usize, offset: u32, pid: u32) -> usize {
        hash(code, (u64::from(offset) << 32) | u64::from(pid)) & (SLOTS_PER_FRAME - 1)
    }

    #[test]
    fn the_lines_of_one_function_start_their_probes_apart() {
        // 256 call instructions of one function (2-byte code units) over 16,384 slots: drawn at
        // random, about 256² / (2 · 16,384) = 2 pairs would share a start.
        let starts: std::collections::HashSet<usize> =
            (0..256).map(|i| start(0x7f3a_1c2d_4e50, 2 * i, 4242)).collect();
        assert!(starts.len() >= 250, "{} distinct starts of 256", starts.len());
        // The same line in two processes (a fork child) starts elsewhere too.
        assert_ne!(start(0x7f3a_1c2d_4e50, 40, 4242), start(0x7f3a_1c2d_4e50, 40, 4243));
    }

    #[test]
    fn a_table_filled_as_an_import_of_pytorch_fills_it_finds_every_key_a_slot() {
        // 3,000 code objects 16-byte aligned in a heap-like range, each with 1 to 48 call lines
        // (a large module's body has more than MAX_PROBES = 32): 73,500 keys would not fit, so
        // the first 6,000 (37 % of the table, more than a PyTorch import uses with one frame),
        // placed by linear probing as `number_of` does. Each must find a free slot within
        // MAX_PROBES.
        let mut table = vec![false; SLOTS_PER_FRAME];
        let mut longest = 0;
        let keys = (0..3000usize)
            .flat_map(|i| {
                let code = 0x7f00_0000_0000 + i * 0x1f0;
                (0..1 + i % 48).map(move |line| (code, 2 * line as u32 + 6))
            })
            .take(6000);
        for (code, offset) in keys {
            let begin = start(code, offset, 4242);
            let probes = (0..MAX_PROBES).find(|probe| !table[(begin + probe) & (SLOTS_PER_FRAME - 1)]);
            let probes = probes.unwrap_or_else(|| panic!("no slot for offset {offset} of {code:#x}"));
            table[(begin + probes) & (SLOTS_PER_FRAME - 1)] = true;
            longest = longest.max(probes);
        }
        assert!(longest < MAX_PROBES / 2, "longest probe {longest}");
    }
}
