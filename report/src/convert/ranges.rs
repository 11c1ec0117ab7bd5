//! The capture ranges (run format 1.9) as a track of their own: a pseudo-process `capture
//! ranges` with one slice per range, named `range N`, its arguments saying what opened and
//! closed it. A run without a capture option has no such track.

use std::io;

use mlprof_trace::{ArgShape, ArgValue, Slice, TraceWriter};

use super::converter::Converter;

/// Pseudo-process id of the ranges' track (GPU devices start at 0x4000_0000, energy devices at
/// 0x7fff_0000).
const RANGES_PID: u32 = 0x7ffe_0000;

/// Writes the ranges' track into the converter's current part.
pub(super) fn write<W: TraceWriter>(c: &mut Converter<'_, W>) -> io::Result<()> {
    let meta = c.meta;
    if meta.capture.is_none() {
        return Ok(());
    }
    let start = meta.info.start_mono_ns;
    let last_edge = meta.range_edges.iter().map(|e| e.time_ns).max().unwrap_or(start);
    let end = meta.end.as_ref().map_or(last_edge, |e| e.end_ns.max(last_edge));
    let capture = meta.capture(start, end);
    let process = c.out.process(RANGES_PID, Some("capture ranges"))?;
    let thread = c.out.thread(process, RANGES_PID, Some("capture ranges"))?;
    let category = c.out.intern("mlprof.capture");
    for range in &capture.ranges {
        let name = c.out.intern(&format!("range {}", range.number));
        let args = [
            ("opened_by", ArgValue::Str(&range.opened_by)),
            ("closed_by", ArgValue::Str(&range.closed_by)),
            ("opened_pid", ArgValue::UInt(range.opened_pid as u64)),
            ("closed_pid", ArgValue::UInt(range.closed_pid as u64)),
        ];
        let slice = Slice {
            start_ns: start + range.start_ns,
            dur_ns: range.duration_ns,
            name,
            category,
            args: &args,
            shape: ArgShape::NONE,
            outermost: true,
        };
        c.out.slice(thread, &slice)?;
    }
    Ok(())
}
