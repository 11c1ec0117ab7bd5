//! ITT annotations: a task or frame is a slice named after it (category `itt,<domain>`; on one
//! thread they nest by time, so system calls sit under the op or phase that made them), a
//! marker, pause or resume an instant. A DataLoader batch also gets a flow arrow from the end
//! of its `batch.fetch` (in the worker) to its `batch.wait` (in the main process).

use std::io;

use mlprof_format::func::{Class, Func};
use mlprof_format::record::{Event, IttSpan};
use mlprof_trace::{ArgList, ArgShape, ArgValue, Flow, Instant, Slice, ThreadHandle, TraceWriter};

use super::converter::{Converter, Text};
use crate::pipeline::{DATA, FETCH, WAIT, flow_id};

pub(super) fn write<W: TraceWriter>(
    c: &mut Converter<'_, W>,
    func: Func,
    event: &Event,
    thread: ThreadHandle,
    site: u32,
) -> io::Result<()> {
    let span = IttSpan::from_event(event);
    let name = c.text(match (func, span.name) {
        (Func::IttPause, _) => Text::Literal("itt pause"),
        (Func::IttResume, _) => Text::Literal("itt resume"),
        (_, 0) => Text::Function(func),
        (_, id) => Text::Run(id),
    });
    let domain = c.text(if span.domain == 0 { Text::Literal("") } else { Text::Run(span.domain) });
    let category = c.text(Text::IttCategory(span.domain));
    if func.class() == Class::Span {
        let mut args = ArgList::<6>::new();
        args.push("domain", ArgValue::Interned(domain));
        args.push("id", ArgValue::UInt(span.id));
        args.push("depth", ArgValue::Int(span.depth.into()));
        // `--sites`: the Python line that made the op (no shape: a span's keys are looked at).
        super::calls::site_args(c, site, ArgShape::NONE, &mut args);
        // A task at depth 0 had no open task around it; frames come with depth 0 but do not
        // nest with tasks, so they prove nothing.
        let outermost = func == Func::IttTask && span.depth == 0;
        let slice = Slice {
            start_ns: span.start,
            dur_ns: span.dur,
            name,
            category,
            args: args.as_slice(),
            shape: ArgShape::NONE,
            outermost,
        };
        c.out.slice(thread, &slice)?;
        batch_flow(c, &span, thread)
    } else {
        let args = [("domain", ArgValue::Interned(domain)), ("id", ArgValue::UInt(span.id))];
        c.out.instant(thread, &Instant { time_ns: span.start, name, category, args: &args })
    }
}

/// A DataLoader batch's arrow: its tail inside the end of the batch's `batch.fetch`, its head
/// bound to the start of its `batch.wait`. Both spans carry the main pid in `parent` and the
/// batch id in `id`, which make the flow id.
fn batch_flow<W: TraceWriter>(
    c: &mut Converter<'_, W>,
    span: &IttSpan,
    thread: ThreadHandle,
) -> io::Result<()> {
    if span.domain != DATA || (span.name != FETCH && span.name != WAIT) {
        return Ok(());
    }
    let args = [("batch_id", ArgValue::UInt(span.id)), ("main_pid", ArgValue::UInt(span.parent))];
    let flow = Flow {
        id: flow_id(span.parent, span.id),
        name: c.text(Text::Literal("batch")),
        category: c.text(Text::Literal("mlprof.data.flow")),
        args: &args,
    };
    // 1 ns inside the slice's end or start, so that the flow binds to this slice and not to a
    // neighbour that touches it.
    if span.name == FETCH {
        c.out.flow_begin(thread, span.start + span.dur.saturating_sub(1), &flow)
    } else {
        c.out.flow_end(thread, span.start + span.dur.min(1), &flow)
    }
}
