//! The GPU timeline in a trace: per device a process ("CUDA device 0"), per CUDA stream a thread of it
//! ("stream 7"), each kernel, copy and memset a slice there on the run's clock, and an arrow
//! from each linked launch or copy call to the GPU work it issued (CUPTI's correlation id).
//!
//! GPU work comes in CUPTI's order, late and across streams: its tracks are declared as having
//! spans, so writers that need a thread's slices in time order sort them.

use std::io;

use mlprof_format::gpu::{ACTIVITY_KERNEL, ACTIVITY_LINK, ACTIVITY_MEMCPY, GpuActivity};
use mlprof_format::record::{Event, GpuCall};
use mlprof_trace::{ArgList, ArgShape, ArgValue, CounterValue, Flow, Slice, ThreadHandle, TraceWriter};

use super::converter::{Converter, CounterKey, Text};
use crate::gpu_timeline::merged;
use crate::run::stream::SpanThreads;

/// Process ids of the device tracks: above any Linux pid (at most 2^22), so never a process's,
/// and apart from the energy tracks' GPUs (0x7fff_0000 + NVML index: NVML numbers devices its
/// own way, CUDA as CUDA_VISIBLE_DEVICES says).
const DEVICE_PID_BASE: u32 = 0x4000_0000;

/// The arrow id of GPU work `correlation` of process `pid` (53 bits: exact as a JSON number;
/// the top bit apart from the DataLoader's arrows, which count up from 1).
fn flow_id(pid: u32, correlation: u32) -> u64 {
    1 << 52 | (u64::from(pid) & 0xf_ffff) << 32 | u64::from(correlation)
}

impl<W: TraceWriter> Converter<'_, W> {
    /// Writes a GPU activity frame: work as slices on its device's stream tracks, links as the
    /// tails of arrows on the host calls' threads.
    pub(super) fn gpu(&mut self, records: &[GpuActivity], span_threads: &SpanThreads) -> io::Result<()> {
        for record in records {
            let end = record.start.saturating_add(record.dur);
            if !self.options().pid(record.pid) || !self.options().in_window(record.start, end) {
                continue;
            }
            match record.what {
                _ if record.is_work() => self.gpu_work(record, span_threads)?,
                ACTIVITY_LINK => self.gpu_link(record, span_threads)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn gpu_work(&mut self, record: &GpuActivity, span_threads: &SpanThreads) -> io::Result<()> {
        let pid = DEVICE_PID_BASE + u32::from(record.device);
        let tid = DEVICE_PID_BASE | u32::from(record.device) << 20 | (record.stream & 0xf_ffff);
        if !self.has_thread(pid, tid) {
            let process =
                self.named_process(pid, &format!("CUDA device {} (GPU timeline)", record.device))?;
            self.named_thread(process, pid, tid, &format!("stream {}", record.stream), span_threads)?;
        }
        let thread = self.thread(pid, tid, span_threads)?.handle;
        self.gpu_busy
            .entry(record.device)
            .or_default()
            .push((record.start, record.start.saturating_add(record.dur)));
        let (name, category) = match record.what {
            ACTIVITY_KERNEL => (Text::KernelName(record.value), "gpu_kernel"),
            ACTIVITY_MEMCPY => (Text::Memcpy(record.detail), "gpu_memcpy"),
            _ => (Text::Literal("memset"), "gpu_memset"),
        };
        let (name, category) = (self.text(name), self.text(Text::Literal(category)));
        let launch = GpuCall { arg: record.grid, aux: record.block, ..GpuCall::default() };
        let (grid, block) = (launch.grid(), launch.block());
        let dims = [grid.0, grid.1, grid.2, block.0, block.1, block.2].map(u64::from);
        // On the stack, as the calls' arguments are: no allocation per slice.
        let mut args = ArgList::<7>::new();
        args.push("pid", ArgValue::UInt(u64::from(record.pid)));
        args.push("correlation", ArgValue::UInt(u64::from(record.correlation)));
        args.push("stream", ArgValue::UInt(u64::from(record.stream)));
        if record.what == ACTIVITY_KERNEL {
            args.push("grid", ArgValue::UInts(&dims[..3]));
            args.push("block", ArgValue::UInts(&dims[3..]));
            args.push("registers", ArgValue::UInt(u64::from(record.aux)));
            args.push("shared_bytes", ArgValue::UInt(u64::from(record.shared)));
        } else {
            args.push("bytes", ArgValue::UInt(record.value));
        }
        let slice = Slice {
            start_ns: record.start,
            dur_ns: record.dur,
            name,
            category,
            args: args.as_slice(),
            shape: ArgShape::NONE,
            outermost: false,
        };
        self.out.slice(thread, &slice)?;
        let flow = Flow { id: flow_id(record.pid, record.correlation), name, category, args: &[] };
        // 1 ns inside the slice, so the arrow binds to it and not to a neighbour that touches it.
        self.out.flow_end(thread, record.start + record.dur.min(1), &flow)
    }

    /// At the end: per device a counter that is 1 while any of its work runs, 0 otherwise
    /// (the union of its intervals, in time order; GPU work comes in CUPTI's order, so only now).
    pub(super) fn gpu_busy_counters(&mut self) -> io::Result<()> {
        for (device, intervals) in std::mem::take(&mut self.gpu_busy) {
            let pid = DEVICE_PID_BASE + u32::from(device);
            let track = self.counter(CounterKey::GpuBusy { pid }, pid, || "GPU busy".to_string())?;
            for (from, to) in merged(intervals) {
                self.out.counter(track, from, CounterValue::UInt(1))?;
                self.out.counter(track, to, CounterValue::UInt(0))?;
            }
        }
        Ok(())
    }

    /// A link comes before its host call in the file (the collector writes a batch's GPU
    /// frame first): kept until the call's slice is written, which the arrow starts from.
    fn gpu_link(&mut self, link: &GpuActivity, _span_threads: &SpanThreads) -> io::Result<()> {
        self.gpu_links.insert((link.pid, link.value as u32, link.start), link.correlation);
        Ok(())
    }

    /// Right after the slice of a call flagged as correlated: the tail of the arrow to the GPU
    /// work it issued (when its link was seen).
    pub(super) fn gpu_flow_from(&mut self, call: &Event, thread: ThreadHandle) -> io::Result<()> {
        let Some(correlation) = self.gpu_links.remove(&(call.pid, call.tid, call.start)) else {
            return Ok(());
        };
        let name = self.text(Text::Literal("launch"));
        let category = self.text(Text::Literal("gpu_flow"));
        let flow = Flow { id: flow_id(call.pid, correlation), name, category, args: &[] };
        // 1 ns inside the call's end, so the arrow binds to it and not to a call that touches it.
        self.out.flow_begin(thread, call.start + call.dur.saturating_sub(1), &flow)
    }
}
