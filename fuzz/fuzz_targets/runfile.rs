//! Feeds arbitrary bytes to the run-file reader and walks every frame, three times: decoding
//! events, skipping them, and viewing them in place (the ways `mlprof` reads a file). The
//! reader must return frames, `Ok(None)` or an error for any input: never panic, hang or
//! allocate beyond one frame; in place, the same events as decoded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mlprof_format::record::Event;
use mlprof_format::runfile::{Frame, InPlace, RunReader};
use zerocopy::IntoBytes;

fn walk(data: &[u8], skip_events: bool) {
    let Ok(mut reader) = RunReader::new(data) else { return };
    reader.skip_events(skip_events);
    // Every frame consumes at least its 8-byte header, so this bounds the loop.
    for _ in 0..=data.len() / 8 + 1 {
        match reader.next_frame() {
            Ok(Some(frame)) => {
                if let Frame::Events(events) = frame {
                    let _ = events.iter().map(|e| e.kind as u64).sum::<u64>();
                }
            }
            Ok(None) | Err(_) => return,
        }
    }
    panic!("the reader returned more frames than the input can hold");
}

/// The events of every frame, read into the reader's buffer or (`in_place`) viewed in `data`.
fn events(data: &[u8], in_place: bool) -> Vec<Event> {
    let mut all = Vec::new();
    let Ok(mut reader) = RunReader::new(data) else { return all };
    for _ in 0..=data.len() / 8 + 1 {
        let frame = if in_place {
            match reader.next_frame_in_place() {
                Ok(Some(InPlace::Events(events))) => Some(events.to_vec()),
                Ok(Some(InPlace::Frame(Frame::Events(events)))) => Some(events.to_vec()),
                Ok(Some(InPlace::Frame(_))) => Some(Vec::new()),
                Ok(None) | Err(_) => None,
            }
        } else {
            match reader.next_frame() {
                Ok(Some(Frame::Events(events))) => Some(events.to_vec()),
                Ok(Some(_)) => Some(Vec::new()),
                Ok(None) | Err(_) => None,
            }
        };
        match frame {
            Some(events) => all.extend(events),
            None => return all,
        }
    }
    panic!("the reader returned more frames than the input can hold");
}

fuzz_target!(|data: &[u8]| {
    walk(data, false);
    walk(data, true);
    // In place needs records 8-byte aligned in memory; the fuzzer's input may not be.
    let mut words = vec![0u64; data.len().div_ceil(8)];
    words.as_mut_bytes()[..data.len()].copy_from_slice(data);
    let aligned = &words.as_bytes()[..data.len()];
    assert!(events(aligned, true) == events(aligned, false), "in place read other events than by copy");
});
