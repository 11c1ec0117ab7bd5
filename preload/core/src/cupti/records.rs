//! CUPTI's activity records, read through the prefixes that stayed put across its record
//! versions, into our [`GpuActivity`].
//!
//! CUPTI changes its record structs release by release (`CUpti_ActivityKernel4` … `11`,
//! `Memcpy` … `Memcpy6`), each new version appending fields; the fields read here lie in the
//! prefix every version since CUDA 11 shares (offsets checked against CUPTI 13.2's
//! `cupti_activity.h` with `offsetof`). A record of a kind not asked for, or shorter than
//! its prefix, is skipped.

use mlprof_format::gpu::{
    ACTIVITY_KERNEL, ACTIVITY_MEMCPY, ACTIVITY_MEMSET, ACTIVITY_OVERHEAD, ACTIVITY_SYNC, GpuActivity,
    KIND_GPU_ACTIVITY,
};
use mlprof_format::record::pack_launch_dims;

/// `CUpti_ActivityKind` values of the kinds enabled.
pub const KIND_MEMCPY: u32 = 1;
/// Memsets.
pub const KIND_MEMSET: u32 = 2;
/// Kernels, allowed to run concurrently (`CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`).
pub const KIND_CONCURRENT_KERNEL: u32 = 10;
/// CUPTI's overhead.
pub const KIND_OVERHEAD: u32 = 17;
/// Host-side synchronizations.
pub const KIND_SYNCHRONIZATION: u32 = 38;

/// Bytes of each kind's shared prefix that [`translate`] reads.
const KERNEL_PREFIX: usize = 112;
const MEMCPY_PREFIX: usize = 48;
const MEMSET_PREFIX: usize = 48;
const SYNC_PREFIX: usize = 40;
const OVERHEAD_PREFIX: usize = 40;

fn u8_at(bytes: &[u8], at: usize) -> u8 {
    bytes.get(at).copied().unwrap_or(0)
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    bytes.get(at..at + 2).and_then(|b| b.try_into().ok()).map_or(0, u16::from_le_bytes)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    bytes.get(at..at + 4).and_then(|b| b.try_into().ok()).map_or(0, u32::from_le_bytes)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    bytes.get(at..at + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes)
}

/// The CUPTI kind of a record (its first 4 bytes).
fn kind_of(record: &[u8]) -> u32 {
    u32_at(record, 0)
}

/// The bytes a record of `kind` must have for [`translate`] (0: a kind not collected).
fn prefix_len(kind: u32) -> usize {
    match kind {
        KIND_CONCURRENT_KERNEL => KERNEL_PREFIX,
        KIND_MEMCPY => MEMCPY_PREFIX,
        KIND_MEMSET => MEMSET_PREFIX,
        KIND_SYNCHRONIZATION => SYNC_PREFIX,
        KIND_OVERHEAD => OVERHEAD_PREFIX,
        _ => 0,
    }
}

/// A kernel record's name pointer (`const char*` owned by CUPTI), 0 if none.
pub fn kernel_name_pointer(record: &[u8]) -> u64 {
    u64_at(record, 104)
}

/// One record as a [`GpuActivity`] (times as CUPTI gave them; `value` of a kernel is left 0
/// for the caller to set to its name's string id), or `None` for a kind not collected or a
/// record shorter than its prefix. `start`/`end` are CUPTI's, `end` before `start` (CUPTI's
/// "unknown") giving a zero duration.
pub fn translate(record: &[u8]) -> Option<GpuActivity> {
    let kind = kind_of(record);
    let prefix = prefix_len(kind);
    if prefix == 0 || record.len() < prefix {
        return None;
    }
    let base = GpuActivity { kind: KIND_GPU_ACTIVITY, ..GpuActivity::default() };
    let span = |start: u64, end: u64| (start, end.saturating_sub(start));
    Some(match kind {
        KIND_CONCURRENT_KERNEL => {
            let (start, dur) = span(u64_at(record, 16), u64_at(record, 24));
            let grid = (u32_at(record, 52), u32_at(record, 56), u32_at(record, 60));
            let block = (u32_at(record, 64), u32_at(record, 68), u32_at(record, 72));
            let (grid, block) = pack_launch_dims(grid, block);
            GpuActivity {
                what: ACTIVITY_KERNEL,
                aux: u16_at(record, 6),
                start,
                dur,
                device: u32_at(record, 40) as u8,
                context: u32_at(record, 44),
                stream: u32_at(record, 48),
                grid,
                block,
                shared: u32_at(record, 76).saturating_add(u32_at(record, 80)),
                correlation: u32_at(record, 92),
                ..base
            }
        }
        KIND_MEMCPY | KIND_MEMSET => {
            let (start, dur) = span(u64_at(record, 16), u64_at(record, 24));
            let memcpy = kind == KIND_MEMCPY;
            GpuActivity {
                what: if memcpy { ACTIVITY_MEMCPY } else { ACTIVITY_MEMSET },
                // Memcpy: copy kind, then source and destination memory kinds; memset: the
                // memory kind lies at 50 (u16).
                detail: if memcpy { u8_at(record, 4) } else { 0 },
                aux: if memcpy {
                    u8_at(record, 5) as u16 | (u8_at(record, 6) as u16) << 8
                } else {
                    u16_at(record, 50)
                },
                value: u64_at(record, 8),
                start,
                dur,
                device: u32_at(record, 32) as u8,
                context: u32_at(record, 36),
                stream: u32_at(record, 40),
                correlation: u32_at(record, 44),
                ..base
            }
        }
        KIND_SYNCHRONIZATION => {
            let (start, dur) = span(u64_at(record, 8), u64_at(record, 16));
            GpuActivity {
                what: ACTIVITY_SYNC,
                detail: u32_at(record, 4) as u8,
                start,
                dur,
                correlation: u32_at(record, 24),
                context: u32_at(record, 28),
                stream: u32_at(record, 32),
                value: u32_at(record, 36) as u64,
                ..base
            }
        }
        _ => {
            let (start, dur) = span(u64_at(record, 24), u64_at(record, 32));
            GpuActivity { what: ACTIVITY_OVERHEAD, detail: u32_at(record, 4) as u8, start, dur, ..base }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put32(bytes: &mut [u8], at: usize, value: u32) {
        bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }

    fn put64(bytes: &mut [u8], at: usize, value: u64) {
        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }

    /// A `CUpti_ActivityKernel11` (224 bytes in CUPTI 13.2) at the offsets its header gives.
    fn kernel11() -> Vec<u8> {
        let mut r = vec![0u8; 224];
        put32(&mut r, 0, KIND_CONCURRENT_KERNEL);
        r[6..8].copy_from_slice(&40u16.to_le_bytes()); // registersPerThread
        put64(&mut r, 16, 5_000); // start
        put64(&mut r, 24, 7_500); // end
        put32(&mut r, 40, 1); // deviceId
        put32(&mut r, 44, 3); // contextId
        put32(&mut r, 48, 7); // streamId
        for (at, v) in [(52, 128), (56, 2), (60, 1), (64, 256), (68, 1), (72, 1)] {
            put32(&mut r, at, v);
        }
        put32(&mut r, 76, 1024); // staticSharedMemory
        put32(&mut r, 80, 2048); // dynamicSharedMemory
        put32(&mut r, 92, 99); // correlationId
        put64(&mut r, 104, 0xdead_beef); // name
        r
    }

    #[test]
    fn a_kernel_record_gives_its_times_place_shape_and_correlation() {
        let record = kernel11();
        let a = translate(&record).unwrap();
        assert_eq!((a.what, a.start, a.dur, a.correlation), (ACTIVITY_KERNEL, 5_000, 2_500, 99));
        assert_eq!((a.device, a.context, a.stream, a.aux, a.shared), (1, 3, 7, 40, 3072));
        assert_eq!((a.grid, a.block), pack_launch_dims((128, 2, 1), (256, 1, 1)));
        assert_eq!(kernel_name_pointer(&record), 0xdead_beef);
        // The Kernel4 prefix is all that is read: a record cut to it reads the same, one cut
        // shorter is skipped.
        assert_eq!(translate(&record[..KERNEL_PREFIX]), Some(a));
        assert_eq!(translate(&record[..KERNEL_PREFIX - 1]), None);
    }

    #[test]
    fn copies_memsets_syncs_and_overhead_read_their_own_offsets() {
        let mut copy = vec![0u8; 80]; // CUpti_ActivityMemcpy6
        put32(&mut copy, 0, KIND_MEMCPY);
        copy[4..7].copy_from_slice(&[1, 2, 3]); // HtoD, pinned → device memory kinds
        put64(&mut copy, 8, 1 << 20);
        put64(&mut copy, 16, 100);
        put64(&mut copy, 24, 300);
        put32(&mut copy, 44, 5);
        let a = translate(&copy).unwrap();
        assert_eq!(
            (a.what, a.detail, a.aux, a.value, a.dur, a.correlation),
            (ACTIVITY_MEMCPY, 1, 0x0302, 1 << 20, 200, 5)
        );

        let mut set = vec![0u8; 56]; // CUpti_ActivityMemset4
        put32(&mut set, 0, KIND_MEMSET);
        put64(&mut set, 8, 4096);
        put64(&mut set, 16, 10);
        put64(&mut set, 24, 20);
        set[50..52].copy_from_slice(&2u16.to_le_bytes());
        let a = translate(&set).unwrap();
        assert_eq!((a.what, a.value, a.dur, a.aux), (ACTIVITY_MEMSET, 4096, 10, 2));

        let mut sync = vec![0u8; 48]; // CUpti_ActivitySynchronization2
        put32(&mut sync, 0, KIND_SYNCHRONIZATION);
        put32(&mut sync, 4, 3); // stream synchronize
        put64(&mut sync, 8, 1000);
        put64(&mut sync, 16, 900); // an end before the start: unknown, no duration
        put32(&mut sync, 24, 77);
        let a = translate(&sync).unwrap();
        assert_eq!((a.what, a.detail, a.start, a.dur, a.correlation), (ACTIVITY_SYNC, 3, 1000, 0, 77));

        let mut overhead = vec![0u8; 56]; // CUpti_ActivityOverhead3
        put32(&mut overhead, 0, KIND_OVERHEAD);
        put32(&mut overhead, 4, 1);
        put64(&mut overhead, 24, 50);
        put64(&mut overhead, 32, 80);
        let a = translate(&overhead).unwrap();
        assert_eq!((a.what, a.detail, a.start, a.dur), (ACTIVITY_OVERHEAD, 1, 50, 30));

        let mut runtime = vec![0u8; 64];
        put32(&mut runtime, 0, 5); // an API record: not collected
        assert_eq!(translate(&runtime), None);
    }
}
