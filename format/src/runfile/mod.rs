//! `run.bin`: a file header followed by length-framed records.
//!
//! ```text
//! file   = header frame*
//! header = magic "MLPROFRB" | major u16 | minor u16 | header_bytes u32 (= 16)      (little endian)
//! frame  = kind u16 | flags u16 | len u32 | payload[len] | zero padding to a multiple of 8
//! ```
//!
//! Bulk events are [`FRAME_EVENTS`] frames holding `len / 64` raw [`Event`](crate::record::Event)
//! records (times in CLOCK_MONOTONIC ns); metadata frames are postcard-encoded structs whose
//! fields are only ever appended. Readers skip frame kinds they do not know, stop with a warning
//! at a truncated final frame (a collector killed mid-run), and return an error — never panic —
//! on corrupt input. A cleanly finalized file ends with a [`FRAME_END`] frame.
//!
//! Split by job: `frames` (kinds, metadata structs, [`Frame`]), `writer` ([`RunWriter`]) and
//! `reader` ([`RunReader`], [`Error`]); the round-trip tests below exercise both ends.

mod frames;
mod reader;
mod writer;

pub use frames::{
    AggregateSample, DropSample, FRAME_AGGREGATES, FRAME_DROPS, FRAME_END, FRAME_ENERGY_DEVICE,
    FRAME_ENERGY_NOTE, FRAME_ENERGY_SAMPLES, FRAME_EVENTS, FRAME_GPU_ACTIVITY, FRAME_NODE, FRAME_PROCESS,
    FRAME_PROCESS_EXIT, FRAME_RUN_INFO, FRAME_STRING, FRAME_SYMBOL, FRAME_THREAD, Frame, MAX_FRAME_BYTES,
    NodeInfo, ProcessExit, ProcessInfo, RunEnd, RunInfo, SymbolInfo, ThreadInfo,
};
pub use reader::{Error, InPlace, RunReader};
pub use writer::{RunWriter, create_run_file};

/// The first 8 bytes of every run file.
pub const FILE_MAGIC: [u8; 8] = *b"MLPROFRB";
/// Incompatible changes; readers refuse a newer major.
pub const FORMAT_MAJOR: u16 = 1;
/// Compatible additions (new frame kinds, appended fields). A reader decodes a metadata struct
/// by the file's minor version, so a struct with appended fields still reads older files.
/// 1.2: energy frames (kinds 10..=12).
/// 1.3: `DropSample::interrupted` (drops by reason).
/// 1.4: `ProcessInfo::rank` and `ProcessInfo::node`; [`NodeInfo`] frames (merged runs).
/// 1.5: [`FRAME_GPU_ACTIVITY`] frames (CUPTI activity records, [`crate::gpu`]).
/// 1.6: call sites ([`crate::site`]): `FRAME_SITE` and `FRAME_EVENT_SITES` frames.
/// 1.7: sampled stacks ([`crate::sample`]): module, stack, samples and sampling frames.
/// 1.8: Python frames in sampled stacks ([`crate::sample::FRAME_PYTHON`], kind 29).
/// 1.9: capture ranges ([`crate::range`]): capture (31) and range edge (32) frames; ring
///      control kind `KIND_CAPTURE_EDGE` (0x8010).
pub const FORMAT_MINOR: u16 = 9;
/// Size of the header this version writes; readers skip the extra bytes of a larger one.
const FILE_HEADER_BYTES: u32 = 16;

/// Zero bytes after a payload of `len` bytes, up to the next multiple of 8.
fn padding_for(len: u32) -> usize {
    (8 - (len as usize % 8)) % 8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Event;
    use zerocopy::IntoBytes;

    fn sample_file() -> Vec<u8> {
        let info = RunInfo { host: "h".into(), session: "s".into(), ..Default::default() };
        let mut w = RunWriter::new(Vec::new(), &info).unwrap();
        w.write_string(42, b"/tmp/x").unwrap();
        w.write_process(&ProcessInfo { pid: 10, ppid: 1, argv: vec!["a".into()], ..Default::default() })
            .unwrap();
        let events: Vec<Event> =
            (0..100).map(|i| Event { kind: 20, pid: 10, tid: 10, arg: i, ..Default::default() }).collect();
        w.write_events(&events).unwrap();
        w.finish(&RunEnd { end_ns: 5, events: 100, dropped: 0 }).unwrap()
    }

    fn read_all(bytes: &[u8]) -> Result<(usize, bool, bool, u64), Error> {
        let mut r = RunReader::new(bytes)?;
        let mut events = 0;
        while let Some(frame) = r.next_frame()? {
            if let Frame::Events(e) = frame {
                events += e.len();
            }
        }
        Ok((events, r.truncated(), r.complete(), r.skipped_frames()))
    }

    #[test]
    fn capture_and_range_edge_frames_round_trip() {
        use crate::range::{CaptureInfo, RangeEdge};
        let info = CaptureInfo { source: 1, limit: 2, paused: true, steps: (3, 5), ..Default::default() };
        let edge = RangeEdge { range: 2, opened: true, time_ns: 99, pid: 7, tid: 8, trigger: 5 };
        let mut w = RunWriter::new(Vec::new(), &RunInfo::default()).unwrap();
        w.write_capture(&info).unwrap();
        w.write_range_edge(&edge).unwrap();
        let bytes = w.finish(&RunEnd::default()).unwrap();
        let mut r = RunReader::new(&bytes[..]).unwrap();
        let (mut got_info, mut got_edge) = (None, None);
        while let Some(frame) = r.next_frame().unwrap() {
            match frame {
                Frame::Capture(i) => got_info = Some(i),
                Frame::RangeEdge(e) => got_edge = Some(e),
                _ => {}
            }
        }
        assert_eq!((got_info, got_edge), (Some(info), Some(edge)));
        assert_eq!(r.skipped_frames(), 0);
    }

    #[test]
    fn round_trip() {
        let bytes = sample_file();
        let mut r = RunReader::new(&bytes[..]).unwrap();
        let mut saw = Vec::new();
        while let Some(frame) = r.next_frame().unwrap() {
            match frame {
                Frame::RunInfo(i) => saw.push(format!("info {}", i.host)),
                Frame::String { id, bytes } => {
                    saw.push(format!("str {id} {}", String::from_utf8_lossy(bytes)))
                }
                Frame::Process(p) => saw.push(format!("proc {}", p.pid)),
                Frame::Events(e) => saw.push(format!("events {} last {}", e.len(), e[e.len() - 1].arg)),
                Frame::End(e) => saw.push(format!("end {}", e.events)),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(saw, ["info h", "str 42 /tmp/x", "proc 10", "events 100 last 99", "end 100"]);
        assert!(r.complete() && !r.truncated());
    }

    /// Sites round-trip beside their events, read copied or in place; a sites frame with no
    /// events frame before it, or with another count, is corruption at its offset.
    #[test]
    fn event_sites_follow_their_events() {
        use crate::site::{FRAME_EVENT_SITES, SiteInfo, encode_event_sites};
        let info = RunInfo::default();
        let mut w = RunWriter::new(Vec::new(), &info).unwrap();
        let site = SiteInfo { id: 3, file: 1, function: 2, line: 42, ..Default::default() };
        w.write_site(&site).unwrap();
        let events: Vec<Event> = (0..4).map(|i| Event { kind: 20, arg: i, ..Default::default() }).collect();
        w.write_events_with_sites(&events, &[0, 3, 0, 3]).unwrap();
        // No site at all: no sites frame.
        w.write_events_with_sites(&events, &[0; 4]).unwrap();
        let bytes = w.finish(&RunEnd::default()).unwrap();
        for in_place in [false, true] {
            let mut r = RunReader::new(&bytes[..]).unwrap();
            let mut saw = Vec::new();
            loop {
                let frame = if in_place {
                    match r.next_frame_in_place().unwrap() {
                        Some(InPlace::Events(e)) => Some(Frame::Events(e)),
                        Some(InPlace::Frame(f)) => Some(f),
                        None => None,
                    }
                } else {
                    r.next_frame().unwrap()
                };
                match frame {
                    None => break,
                    Some(Frame::Site(s)) => saw.push(format!("site {} line {}", s.id, s.line)),
                    Some(Frame::Events(e)) => saw.push(format!("events {}", e.len())),
                    Some(Frame::EventSites(s)) => saw.push(format!("sites {s:?}")),
                    Some(_) => {}
                }
            }
            assert_eq!(saw, ["site 3 line 42", "events 4", "sites [0, 3, 0, 3]", "events 4"], "{in_place}");
        }
        // A sites frame after a metadata frame.
        let mut w = RunWriter::new(Vec::new(), &info).unwrap();
        w.write_site(&site).unwrap();
        w.write_frame(FRAME_EVENT_SITES, &encode_event_sites(&[1])).unwrap();
        let bytes = w.finish(&RunEnd::default()).unwrap();
        let mut r = RunReader::new(&bytes[..]).unwrap();
        let err = loop {
            match r.next_frame() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("read without error"),
                Err(e) => break e,
            }
        };
        assert!(matches!(err, Error::Corrupt { offset, .. } if offset > 16), "{err:?}");
    }

    /// Every frame and event, read in place from `bytes` (and how many events were in place).
    fn read_in_place(bytes: &[u8]) -> Result<(Vec<Event>, usize, bool, bool), Error> {
        let mut r = RunReader::new(bytes)?;
        let (mut events, mut in_place) = (Vec::new(), 0);
        while let Some(frame) = r.next_frame_in_place()? {
            match frame {
                InPlace::Events(e) => {
                    events.extend_from_slice(e);
                    in_place += e.len();
                }
                InPlace::Frame(Frame::Events(e)) => events.extend_from_slice(e),
                InPlace::Frame(_) => {}
            }
        }
        Ok((events, in_place, r.truncated(), r.complete()))
    }

    #[test]
    fn events_read_in_place_are_those_read_by_copy_and_cuts_read_the_same() {
        let bytes = sample_file();
        // 8-byte aligned memory: the records are viewed where they lie.
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        words.as_mut_bytes()[..bytes.len()].copy_from_slice(&bytes);
        let aligned = &words.as_bytes()[..bytes.len()];
        let (events, in_place, truncated, complete) = read_in_place(aligned).unwrap();
        assert_eq!((events.len(), in_place, truncated, complete), (100, 100, false, true));
        assert_eq!(events[99].arg, 99);
        // Misaligned memory: copied instead, the same records.
        let mut shifted = vec![0u8; bytes.len() + 1];
        shifted[1..].copy_from_slice(aligned);
        let (copied, in_place, ..) = read_in_place(&shifted[1..]).unwrap();
        assert_eq!((copied == events, in_place), (true, 0));
        // A cut anywhere reads what `next_frame` reads.
        for cut in 16..bytes.len() {
            let (events, _, truncated, complete) = read_in_place(&aligned[..cut]).unwrap();
            let (expected, expected_truncated, expected_complete, _) = read_all(&bytes[..cut]).unwrap();
            assert_eq!(
                (events.len(), truncated, complete),
                (expected, expected_truncated, expected_complete),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn truncation_at_every_byte_reads_a_prefix_without_error() {
        let bytes = sample_file();
        let mut last = 0;
        for cut in 16..bytes.len() {
            let (events, truncated, complete, _) = read_all(&bytes[..cut]).unwrap();
            // Only a cut inside the end frame's padding still reads as complete.
            assert!(truncated != complete, "cut {cut}");
            assert!(!complete || cut > bytes.len() - 8, "cut {cut}");
            assert!(events == 0 || events == 100);
            assert!(events >= last);
            last = events;
        }
        assert_eq!(read_all(&bytes).unwrap(), (100, false, true, 0));
    }

    #[test]
    fn a_struct_with_appended_fields_still_reads_files_written_before_them() {
        // A 1.2 file: its drop samples have no `interrupted`.
        #[derive(serde::Serialize)]
        struct Old {
            stream: u64,
            pid: u32,
            tid: u32,
            time_ns: u64,
            dropped: u64,
        }
        let payload =
            postcard::to_stdvec(&vec![Old { stream: 3, pid: 10, tid: 11, time_ns: 99, dropped: 7 }]).unwrap();
        let mut bytes = FILE_MAGIC.to_vec();
        bytes.extend_from_slice(&FORMAT_MAJOR.to_le_bytes());
        bytes.extend_from_slice(&2u16.to_le_bytes());
        bytes.extend_from_slice(&FILE_HEADER_BYTES.to_le_bytes());
        bytes.extend_from_slice(&FRAME_DROPS.to_le_bytes());
        bytes.extend_from_slice(&0u16.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&payload);
        bytes.resize(bytes.len() + padding_for(payload.len() as u32), 0);
        let mut reader = RunReader::new(&bytes[..]).unwrap();
        let Some(Frame::Drops(samples)) = reader.next_frame().unwrap() else { panic!("a drops frame") };
        assert_eq!(
            samples,
            vec![DropSample { stream: 3, pid: 10, tid: 11, time_ns: 99, dropped: 7, interrupted: 0 }]
        );
    }

    #[test]
    fn process_info_of_a_1_3_file_reads_without_rank() {
        #[derive(serde::Serialize)]
        struct Old {
            pid: u32,
            ppid: u32,
            argv: Vec<String>,
            start_ns: u64,
            forked: bool,
        }
        let old = Old { pid: 7, ppid: 1, argv: vec!["a".into()], start_ns: 5, forked: true };
        let payload = postcard::to_stdvec(&old).unwrap();
        let mut bytes = FILE_MAGIC.to_vec();
        bytes.extend_from_slice(&FORMAT_MAJOR.to_le_bytes());
        bytes.extend_from_slice(&3u16.to_le_bytes());
        bytes.extend_from_slice(&FILE_HEADER_BYTES.to_le_bytes());
        bytes.extend_from_slice(&FRAME_PROCESS.to_le_bytes());
        bytes.extend_from_slice(&0u16.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&payload);
        bytes.resize(bytes.len() + padding_for(payload.len() as u32), 0);
        let mut reader = RunReader::new(&bytes[..]).unwrap();
        let Some(Frame::Process(p)) = reader.next_frame().unwrap() else { panic!("a process frame") };
        assert_eq!(
            p,
            ProcessInfo {
                pid: 7,
                ppid: 1,
                argv: vec!["a".into()],
                start_ns: 5,
                forked: true,
                rank: None,
                node: 0
            }
        );
    }

    #[test]
    fn rank_and_node_frames_round_trip() {
        let rank = crate::rank::RankInfo {
            rank: 3,
            world_size: Some(4),
            source: "RANK".into(),
            ..Default::default()
        };
        let process = ProcessInfo { pid: 9, rank: Some(rank), node: 2, ..Default::default() };
        let node = NodeInfo {
            node: 2,
            host: "n2".into(),
            offset_ns: -5,
            residual_ns: Some(3),
            ..Default::default()
        };
        let mut w = RunWriter::new(Vec::new(), &RunInfo::default()).unwrap();
        w.write_node(&node).unwrap();
        w.write_process(&process).unwrap();
        let bytes = w.finish(&RunEnd::default()).unwrap();
        let mut r = RunReader::new(&bytes[..]).unwrap();
        assert!(matches!(r.next_frame().unwrap(), Some(Frame::RunInfo(_))));
        let Some(Frame::Node(n)) = r.next_frame().unwrap() else { panic!("a node frame") };
        assert_eq!(n, node);
        let Some(Frame::Process(p)) = r.next_frame().unwrap() else { panic!("a process frame") };
        assert_eq!(p, process);
    }

    #[test]
    fn unknown_frames_are_skipped() {
        let info = RunInfo::default();
        let mut w = RunWriter::new(Vec::new(), &info).unwrap();
        w.write_frame(999, b"future stuff").unwrap();
        w.write_events(&[Event { kind: 20, ..Default::default() }]).unwrap();
        let bytes = w.finish(&RunEnd::default()).unwrap();
        assert_eq!(read_all(&bytes).unwrap(), (1, false, true, 1));
    }

    #[test]
    fn corrupt_input_is_an_error_not_a_panic() {
        assert!(matches!(RunReader::new(&b"hello world, not a run"[..]), Err(Error::NotARunFile)));
        let mut bytes = sample_file();
        // Newer major version.
        bytes[8] = 9;
        assert!(matches!(RunReader::new(&bytes[..]), Err(Error::UnsupportedVersion { .. })));
        // An absurd frame length.
        let mut bytes = sample_file();
        bytes[16 + 4..16 + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(read_all(&bytes), Err(Error::Corrupt { .. })));
        // Garbage metadata.
        let mut bytes = sample_file();
        for b in &mut bytes[24..40] {
            *b = 0xff;
        }
        assert!(read_all(&bytes).is_err());
        // Random corruption anywhere: errors or a readable prefix, never a panic.
        let clean = sample_file();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut bytes = clean.clone();
            for _ in 0..4 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed as usize) % bytes.len();
                bytes[at] = (seed >> 32) as u8;
            }
            let _ = read_all(&bytes);
        }
    }
}
