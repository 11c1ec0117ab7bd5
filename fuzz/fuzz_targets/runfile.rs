//! Feeds arbitrary bytes to the run-file reader and walks every frame, twice: decoding events
//! and skipping them (the two ways `mlprof` reads a file).  The reader must return frames,
//! `Ok(None)` or an error for any input: never panic, hang or allocate beyond one frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mlprof_format::runfile::{Frame, RunReader};

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

fuzz_target!(|data: &[u8]| {
    walk(data, false);
    walk(data, true);
});
