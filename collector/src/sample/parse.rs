//! The records of the sampler's events, decoded from their bytes: the layout follows from
//! `attr::SAMPLE_TYPE` and `sample_id_all` (include/uapi/linux/perf_event.h, `perf_event_type`).

/// Record kinds (`PERF_RECORD_*`) the sampler reads; the others are skipped.
const RECORD_LOST: u32 = 2;
const RECORD_COMM: u32 = 3;
const RECORD_EXIT: u32 = 4;
const RECORD_FORK: u32 = 7;
const RECORD_SAMPLE: u32 = 9;
const RECORD_MMAP2: u32 = 10;
const RECORD_LOST_SAMPLES: u32 = 13;

/// `misc` of a COMM record made by an exec.
const MISC_COMM_EXEC: u16 = 1 << 13;
/// `misc` of an MMAP2 record that carries a build id instead of device and inode.
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;

/// The user registers a sample carries, in the order of their bits in the mask (see `unwind`).
pub(crate) const MAX_REGS: usize = 3;

/// One decoded record; byte fields borrow from the record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Raw<'a> {
    Sample {
        pid: u32,
        tid: u32,
        time: u64,
        ip: u64,
        /// `None`: the kernel had no user registers (a kernel thread, or a task exiting).
        regs: Option<[u64; MAX_REGS]>,
        /// The copy of the user stack from the stack pointer up (only its valid part).
        stack: &'a [u8],
    },
    Mmap2 {
        pid: u32,
        tid: u32,
        time: u64,
        start: u64,
        len: u64,
        pgoff: u64,
        ino: u64,
        prot: u32,
        path: &'a [u8],
    },
    Comm {
        pid: u32,
        tid: u32,
        time: u64,
        exec: bool,
        name: &'a [u8],
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        time: u64,
    },
    Exit {
        pid: u32,
        ppid: u32,
        tid: u32,
        time: u64,
    },
    /// Records the kernel could not write (ring full): `PERF_RECORD_LOST`'s count.
    Lost {
        records: u64,
        time: u64,
    },
    /// Samples the kernel dropped before writing (`PERF_RECORD_LOST_SAMPLES`).
    LostSamples {
        samples: u64,
        time: u64,
    },
    /// A kind the sampler does not use (throttling notes, …).
    Other {
        time: u64,
    },
}

/// A cursor over little pieces of a record; reading past the end yields zeros and marks it bad.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
    short: bool,
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        if self.bytes.len() - self.at < n {
            self.short = true;
            self.at = self.bytes.len();
            return &[];
        }
        let piece = &self.bytes[self.at..self.at + n];
        self.at += n;
        piece
    }

    fn u64(&mut self) -> u64 {
        self.take(8).try_into().map(u64::from_ne_bytes).unwrap_or(0)
    }

    fn u32(&mut self) -> u32 {
        self.take(4).try_into().map(u32::from_ne_bytes).unwrap_or(0)
    }
}

/// The record's kind from its header.
pub(crate) fn kind(record: &[u8]) -> u32 {
    u32::from_ne_bytes(record[..4].try_into().unwrap_or([0; 4]))
}

/// The record's CLOCK_MONOTONIC time without decoding the rest: a sample's `time` field, the
/// other records' trailing `sample_id` (`pid, tid, time`: its last 8 bytes).
pub(crate) fn time(record: &[u8]) -> u64 {
    let at = if kind(record) == RECORD_SAMPLE { 24 } else { record.len().saturating_sub(8) };
    record.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes).unwrap_or(0)
}

/// Decodes one record (8-byte header included); `None` when it is shorter than its kind needs.
pub(crate) fn decode(record: &[u8]) -> Option<Raw<'_>> {
    let misc = u16::from_ne_bytes([*record.get(4)?, *record.get(5)?]);
    let mut f = Fields { bytes: record, at: 8, short: false };
    let raw = match kind(record) {
        RECORD_SAMPLE => decode_sample(&mut f),
        RECORD_MMAP2 => {
            let (pid, tid, start, len, pgoff) = (f.u32(), f.u32(), f.u64(), f.u64(), f.u64());
            // maj, min, ino, ino_generation; or build id size, padding, 20 bytes of id.
            let ids = f.take(24);
            let ino = if misc & MISC_MMAP_BUILD_ID != 0 {
                0
            } else {
                ids.get(8..16).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes).unwrap_or(0)
            };
            let (prot, _flags) = (f.u32(), f.u32());
            let path = c_string(&record[f.at.min(record.len())..record.len().saturating_sub(16)]);
            Raw::Mmap2 { pid, tid, time: time(record), start, len, pgoff, ino, prot, path }
        }
        RECORD_COMM => {
            let (pid, tid) = (f.u32(), f.u32());
            let name = c_string(&record[f.at.min(record.len())..record.len().saturating_sub(16)]);
            Raw::Comm { pid, tid, time: time(record), exec: misc & MISC_COMM_EXEC != 0, name }
        }
        kind @ (RECORD_FORK | RECORD_EXIT) => {
            let (pid, ppid, tid) = (f.u32(), f.u32(), f.u32());
            let (_ptid, time) = (f.u32(), f.u64());
            if kind == RECORD_FORK {
                Raw::Fork { pid, ppid, tid, time }
            } else {
                Raw::Exit { pid, ppid, tid, time }
            }
        }
        RECORD_LOST => {
            let (_id, records) = (f.u64(), f.u64());
            Raw::Lost { records, time: time(record) }
        }
        RECORD_LOST_SAMPLES => Raw::LostSamples { samples: f.u64(), time: time(record) },
        _ => Raw::Other { time: time(record) },
    };
    (!f.short).then_some(raw)
}

/// `ip, pid, tid, time, regs_user (abi, regs…), stack_user (size, data, dyn_size)`.
fn decode_sample<'a>(f: &mut Fields<'a>) -> Raw<'a> {
    let ip = f.u64();
    let (pid, tid) = (f.u32(), f.u32());
    let time = f.u64();
    let abi = f.u64();
    let regs = (abi != 0).then(|| {
        let mut regs = [0u64; MAX_REGS];
        regs.iter_mut().for_each(|r| *r = f.u64());
        regs
    });
    let size = f.u64() as usize;
    let data = f.take(size);
    let dyn_size = if size == 0 { 0 } else { f.u64() as usize };
    Raw::Sample { pid, tid, time, ip, regs, stack: &data[..dyn_size.min(data.len())] }
}

/// The bytes before the first NUL (the kernel pads names to 8 bytes with NULs).
fn c_string(bytes: &[u8]) -> &[u8] {
    bytes.iter().position(|&b| b == 0).map_or(bytes, |end| &bytes[..end])
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A record of `kind` with `misc` and `body`, its header's size filled in.
    pub(crate) fn record(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut bytes = kind.to_ne_bytes().to_vec();
        bytes.extend_from_slice(&misc.to_ne_bytes());
        bytes.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        bytes.extend_from_slice(body);
        bytes
    }

    fn words(values: &[u64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_ne_bytes()).collect()
    }

    #[test]
    fn a_sample_yields_its_registers_and_the_valid_stack() {
        let mut body = words(&[0x4010, 7 | (9 << 32), 123_456, 2, 0x7ff0, 0x7fe0, 0x4010, 16]);
        body.extend(words(&[0xaaaa, 0xbbbb, 8]));
        let bytes = record(RECORD_SAMPLE, 0, &body);
        assert_eq!(time(&bytes), 123_456);
        let stack = 0xaaaau64.to_ne_bytes();
        let expected = Raw::Sample {
            pid: 7,
            tid: 9,
            time: 123_456,
            ip: 0x4010,
            regs: Some([0x7ff0, 0x7fe0, 0x4010]),
            stack: &stack,
        };
        assert_eq!(decode(&bytes), Some(expected));
        assert_eq!(decode(&bytes[..40]), None, "cut short");
    }

    #[test]
    fn an_mmap2_yields_its_file_and_the_trailing_time() {
        let mut body = words(&[5 | (6 << 32), 0x7000, 0x2000, 0x1000, 0xfd01, 4242, 0, 5]);
        body.extend(b"/usr/lib/libhot.so\0\0\0\0\0\0");
        body.extend(words(&[5 | (6 << 32), 99]));
        let bytes = record(RECORD_MMAP2, 2, &body);
        let raw = decode(&bytes).unwrap();
        assert_eq!(
            raw,
            Raw::Mmap2 {
                pid: 5,
                tid: 6,
                time: 99,
                start: 0x7000,
                len: 0x2000,
                pgoff: 0x1000,
                ino: 4242,
                prot: 5,
                path: b"/usr/lib/libhot.so"
            }
        );
    }

    #[test]
    fn an_exec_comm_and_a_fork() {
        let mut comm = words(&[3 | (3 << 32)]);
        comm.extend(b"python\0\0");
        comm.extend(words(&[3 | (3 << 32), 77]));
        let bytes = record(RECORD_COMM, MISC_COMM_EXEC, &comm);
        let raw = decode(&bytes).unwrap();
        assert_eq!(raw, Raw::Comm { pid: 3, tid: 3, time: 77, exec: true, name: b"python" });
        let fork = words(&[8 | (3 << 32), 8 | (3 << 32), 78, 8 | (8 << 32), 78]);
        let bytes = record(RECORD_FORK, 0, &fork);
        let raw = decode(&bytes).unwrap();
        assert_eq!(raw, Raw::Fork { pid: 8, ppid: 3, tid: 8, time: 78 });
    }
}
