//! CUPTI's activity buffers: the memory we give it (`bufferRequested`) and what we do with a
//! full one (`bufferCompleted`): each record becomes a [`GpuActivity`] in the calling thread's
//! lane (kernel names sent once per process as strings), then a running total of what was
//! delivered and lost goes after them, and the buffer goes back to the system.
//!
//! CUPTI calls these from its own worker thread, or from whichever thread flushes (ours at
//! exit, the application's inside a CUDA call). They take no lock: the totals are atomics, and
//! each thread writes its own lane. Buffers are mapped with raw system calls (no malloc, no
//! hooked `mmap`): CUPTI may ask for one inside any CUDA call of the application.

use core::sync::atomic::{AtomicU64, Ordering};

use mlprof_format::gpu::{
    ACTIVITY_COUNTS, ACTIVITY_FLAG_MONOTONIC, ACTIVITY_KERNEL, GpuActivity, KIND_GPU_ACTIVITY,
};
use mlprof_format::ring::RingView;

use super::records::{kernel_name_pointer, translate};
use crate::clock;
use crate::recorder::{lane, with_lane_for_activity};

/// Bytes of each buffer: CUPTI recommends 1–10 MB; at 224 bytes a kernel record, 2 MiB holds
/// ~9,000 kernels, a few hundred training steps of a launch-bound loop.
pub const BUFFER_BYTES: usize = 2 << 20;

/// Activities of the kinds we asked for that CUPTI delivered to us, in this process.
static DELIVERED: AtomicU64 = AtomicU64::new(0);
/// Activities CUPTI says it dropped (its buffers full before we were given them back).
static CUPTI_DROPPED: AtomicU64 = AtomicU64::new(0);
/// Activities lost to a full lane (or no lane) on their way to the collector.
static RING_DROPPED: AtomicU64 = AtomicU64::new(0);
/// CUPTI's own clock → CLOCK_MONOTONIC, in ns, when CUPTI refused our timestamp callback
/// (`u64::MAX`: not calibrated, the records carry ring ticks).
static CALIBRATION_OFFSET: AtomicU64 = AtomicU64::new(u64::MAX);

/// Makes records carry CUPTI's clock moved by `offset_ns` (wrapping) onto CLOCK_MONOTONIC.
pub fn use_calibration(offset_ns: u64) {
    CALIBRATION_OFFSET.store(offset_ns, Ordering::Relaxed);
}

/// The process's totals start again (a fork child starts its own CUPTI).
pub fn reset_totals() {
    for total in [&DELIVERED, &CUPTI_DROPPED, &RING_DROPPED] {
        total.store(0, Ordering::Relaxed);
    }
    CALIBRATION_OFFSET.store(u64::MAX, Ordering::Relaxed);
}

/// `bufferRequested`: a fresh mapping of [`BUFFER_BYTES`], or none (CUPTI then drops and
/// counts what it cannot store).
///
/// # Safety
/// CUPTI's pointers to its out parameters.
pub unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    // Safety: an anonymous private mapping: no file, no address hint.
    let mapped = unsafe {
        rustix::mm::mmap_anonymous(
            core::ptr::null_mut(),
            BUFFER_BYTES,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::PRIVATE,
        )
    };
    let (ptr, len) = match mapped {
        Ok(ptr) => (ptr as *mut u8, BUFFER_BYTES),
        Err(_) => (core::ptr::null_mut(), 0),
    };
    // Safety: CUPTI's out parameters, valid for writing.
    unsafe {
        *buffer = ptr;
        *size = len;
        *max_records = 0;
    }
}

/// Gives a buffer [`buffer_requested`] mapped back to the system, its records unread.
pub fn release(buffer: *mut u8) {
    if !buffer.is_null() {
        // Safety: the whole mapping buffer_requested made; CUPTI is done with it.
        let _ = unsafe { rustix::mm::munmap(buffer as *mut core::ffi::c_void, BUFFER_BYTES) };
    }
}

/// What [`buffer_completed`] needs of CUPTI: the next record of a buffer and its drop count.
pub trait Reader {
    /// The next record after `previous` (null: the first) in the first `valid` bytes of
    /// `buffer`, as a pointer and its length up to the buffer's end; `None` at the end.
    fn next(&self, buffer: *mut u8, valid: usize, previous: *mut u8) -> Option<*mut u8>;
    /// Records CUPTI dropped for `context`/`stream` since last asked.
    fn dropped(&self, context: *mut core::ffi::c_void, stream: u32) -> u64;
}

/// Turns the records of a completed buffer into GPU activities in this thread's lane, adds
/// CUPTI's drops, sends the totals, and unmaps the buffer.
///
/// # Safety
/// `buffer` is one [`buffer_requested`] mapped, of which CUPTI filled `valid` bytes.
pub unsafe fn buffer_completed(
    reader: &impl Reader,
    context: *mut core::ffi::c_void,
    stream: u32,
    buffer: *mut u8,
    valid: usize,
) {
    if !buffer.is_null() {
        let mut record = core::ptr::null_mut();
        let mut batch = Batch::new();
        while let Some(next) = reader.next(buffer, valid, record) {
            record = next;
            let offset = (next as usize).wrapping_sub(buffer as usize);
            let len = valid.saturating_sub(offset);
            // Safety: CUPTI's record lies inside the buffer's valid bytes, from `next` on.
            let bytes = unsafe { core::slice::from_raw_parts(next as *const u8, len) };
            batch.add(bytes);
        }
        batch.send();
    }
    let dropped = reader.dropped(context, stream);
    if dropped > 0 {
        CUPTI_DROPPED.fetch_add(dropped, Ordering::Relaxed);
    }
    send_totals();
    release(buffer);
}

/// Records gathered on the stack and sent in groups (one lane lookup per group).
struct Batch {
    records: [(GpuActivity, u64); 64],
    len: usize,
}

impl Batch {
    fn new() -> Batch {
        Batch { records: [(GpuActivity::default(), 0); 64], len: 0 }
    }

    fn add(&mut self, bytes: &[u8]) {
        let Some(mut activity) = translate(bytes) else {
            // A kind we did not ask for (another subscriber's, before it took over): delivered,
            // not ours to store.
            return;
        };
        DELIVERED.fetch_add(1, Ordering::Relaxed);
        let offset = CALIBRATION_OFFSET.load(Ordering::Relaxed);
        if offset != u64::MAX {
            activity.start = activity.start.wrapping_add(offset);
            activity.flags |= ACTIVITY_FLAG_MONOTONIC;
        }
        let name = if activity.what == ACTIVITY_KERNEL { kernel_name_pointer(bytes) } else { 0 };
        if let Some(slot) = self.records.get_mut(self.len) {
            *slot = (activity, name);
            self.len += 1;
        }
        if self.len == self.records.len() {
            self.send();
        }
    }

    fn send(&mut self) {
        let records = self.records.get(..self.len).unwrap_or_default();
        let mut sent = 0u64;
        with_lane_for_activity(|ring, lane, pid, state| {
            for (activity, name) in records {
                let mut activity = *activity;
                activity.pid = pid;
                if *name != 0 {
                    activity.value = send_name(ring, lane, pid, state.tid.get(), *name);
                }
                if ring.push_uncounted(lane, &activity.into_event()) {
                    sent += 1;
                }
            }
        });
        RING_DROPPED.fetch_add(self.len as u64 - sent, Ordering::Relaxed);
        self.len = 0;
    }
}

/// Sends kernel name `pointer` (CUPTI's NUL-terminated string) once per process; its string
/// id, or 0 when the lane had no room for it (the kernel then goes unnamed).
fn send_name(ring: &RingView, lane: u32, pid: u32, tid: u32, pointer: u64) -> u64 {
    // Safety: CUPTI's kernel names are NUL-terminated and live as long as the module.
    let name = unsafe { core::ffi::CStr::from_ptr(pointer as *const core::ffi::c_char) }.to_bytes();
    let name = name.get(..name.len().min(mlprof_format::record::MAX_STRING_BYTES)).unwrap_or_default();
    let id = mlprof_format::string_id(name);
    if lane::send_string(ring, lane, pid, tid, id, name) { id } else { 0 }
}

/// Sends the process's running totals (an [`ACTIVITY_COUNTS`] record): the reports take the
/// last one of each process.
pub fn send_totals() {
    let mut counts = GpuActivity {
        what: ACTIVITY_COUNTS,
        value: DELIVERED.load(Ordering::Relaxed),
        grid: CUPTI_DROPPED.load(Ordering::Relaxed),
        ..GpuActivity::default()
    };
    counts.set_ring_dropped(RING_DROPPED.load(Ordering::Relaxed));
    send_state(counts);
}

/// Sends one record about the GPU timeline itself (a state change, the totals), stamped now, on
/// this thread's lane. A full lane loses it: it is no activity, and the next one says as much.
pub fn send_state(mut record: GpuActivity) {
    record.kind = KIND_GPU_ACTIVITY;
    record.start = clock::now();
    with_lane_for_activity(|ring, lane, pid, _| {
        record.pid = pid;
        let _ = ring.push_uncounted(lane, &record.into_event());
    });
}

#[cfg(test)]
mod tests {
    use mlprof_format::gpu::{ACTIVITY_MEMCPY, GpuActivity};
    use mlprof_format::record::KIND_STRING_DEF;

    use super::*;
    use crate::cupti::records::{KIND_CONCURRENT_KERNEL, KIND_MEMCPY};
    use crate::testing::{joined_ring, take_this_threads_items, this_threads_drops};

    const KERNEL_BYTES: usize = 224;
    const MEMCPY_BYTES: usize = 80;

    /// Walks records laid out one after another, each as long as its kind's struct in CUPTI
    /// 13.2 (what `cuptiActivityGetNextRecord` does over CUPTI's own buffers); says `dropped`
    /// once.
    struct Walk {
        dropped: core::cell::Cell<u64>,
    }

    impl Reader for Walk {
        fn next(&self, buffer: *mut u8, valid: usize, previous: *mut u8) -> Option<*mut u8> {
            let at = if previous.is_null() {
                buffer
            } else {
                // Safety: `previous` is a record this walk handed out, inside the buffer.
                let kind = unsafe { (previous as *const u32).read_unaligned() };
                let len = if kind == KIND_CONCURRENT_KERNEL { KERNEL_BYTES } else { MEMCPY_BYTES };
                previous.wrapping_add(len)
            };
            ((at as usize) < buffer as usize + valid).then_some(at)
        }

        fn dropped(&self, _context: *mut core::ffi::c_void, _stream: u32) -> u64 {
            self.dropped.replace(0)
        }
    }

    /// A buffer as CUPTI hands it back: mapped by `buffer_requested`, `records` written in it.
    fn filled(records: &[Vec<u8>]) -> (*mut u8, usize) {
        let (mut buffer, mut size, mut max) = (core::ptr::null_mut(), 0, 0);
        // Safety: valid out pointers.
        unsafe { buffer_requested(&mut buffer, &mut size, &mut max) };
        assert!(!buffer.is_null() && size == BUFFER_BYTES);
        let mut at = 0;
        for record in records {
            // Safety: the mapping holds BUFFER_BYTES; the records used here are far fewer.
            unsafe { core::ptr::copy_nonoverlapping(record.as_ptr(), buffer.add(at), record.len()) };
            at += record.len();
        }
        (buffer, at)
    }

    fn kernel(correlation: u32, name: &'static core::ffi::CStr) -> Vec<u8> {
        let mut r = vec![0u8; KERNEL_BYTES];
        r[0..4].copy_from_slice(&KIND_CONCURRENT_KERNEL.to_le_bytes());
        r[16..24].copy_from_slice(&1_000u64.to_le_bytes());
        r[24..32].copy_from_slice(&1_500u64.to_le_bytes());
        r[92..96].copy_from_slice(&correlation.to_le_bytes());
        r[104..112].copy_from_slice(&(name.as_ptr() as u64).to_le_bytes());
        r
    }

    fn memcpy(correlation: u32) -> Vec<u8> {
        let mut r = vec![0u8; MEMCPY_BYTES];
        r[0..4].copy_from_slice(&KIND_MEMCPY.to_le_bytes());
        r[4] = 1;
        r[8..16].copy_from_slice(&4096u64.to_le_bytes());
        r[44..48].copy_from_slice(&correlation.to_le_bytes());
        r
    }

    #[test]
    fn a_buffer_becomes_records_named_once_then_totals_and_a_full_lane_loses_no_call() {
        joined_ring();
        let name = c"_Z6kernelv";
        let (buffer, valid) = filled(&[kernel(1, name), kernel(2, name), memcpy(3)]);
        let walk = Walk { dropped: core::cell::Cell::new(3) };
        // Safety: a buffer buffer_requested mapped, `valid` bytes filled.
        unsafe { buffer_completed(&walk, core::ptr::null_mut(), 0, buffer, valid) };
        let (records, strings) = take_this_threads_items();
        // The name goes once, before the kernels that carry its id.
        assert_eq!(strings, [(mlprof_format::string_id(b"_Z6kernelv"), b"_Z6kernelv".to_vec())]);
        let activities: Vec<GpuActivity> =
            records.iter().filter(|e| e.kind != KIND_STRING_DEF).map(GpuActivity::from_event).collect();
        let seen: Vec<(u8, u32, u64)> = activities.iter().map(|a| (a.what, a.correlation, a.value)).collect();
        let id = mlprof_format::string_id(b"_Z6kernelv");
        assert_eq!(
            seen,
            [
                (ACTIVITY_KERNEL, 1, id),
                (ACTIVITY_KERNEL, 2, id),
                (ACTIVITY_MEMCPY, 3, 4096),
                (ACTIVITY_COUNTS, 0, 3)
            ]
        );
        // The totals: 3 delivered, 3 dropped by CUPTI, none lost to the ring.
        let totals = activities[3];
        assert_eq!((totals.value, totals.grid, totals.ring_dropped()), (3, 3, 0));

        // 1,100 copies into a lane of 1,024 slots: the lane fills; what does not fit is lost to
        // the ring, counted by the GPU totals and not as lost calls.
        let copies: Vec<Vec<u8>> = (0..1_100).map(memcpy).collect();
        let (buffer, valid) = filled(&copies);
        // Safety: as above.
        unsafe { buffer_completed(&walk, core::ptr::null_mut(), 0, buffer, valid) };
        assert_eq!(this_threads_drops(), 0, "GPU records lost are not calls lost");
        let (records, _) = take_this_threads_items();
        assert_eq!(records.len(), 1_024);
        // 76 activities lost; the totals record after them found no room either, and is not an
        // activity: the next one carries the figures.
        assert_eq!(RING_DROPPED.load(Ordering::Relaxed), 1_100 - 1_024);
    }
}
