//! `mlprof convert`: Chrome Trace Event Format JSON, streamed: one pass for metadata, one for
//! the events, each event written as it is read. Memory holds the metadata (processes, strings,
//! fd tables), never the events.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::{Event, FLAG_NESTED, GpuCall, IttSpan, copy_direction_name};
use mlprof_format::runfile::{AggregateSample, DropSample, Frame};

use crate::run::{self, RunMeta, bytes_moved, nccl_datatype_name, nccl_op_name};

pub struct ConvertStats {
    pub events: u64,
    pub bytes: u64,
}

/// JSON string literal (with quotes).
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"?\"".into())
}

struct TraceWriter<'m, W: Write> {
    out: W,
    first: bool,
    origin_ns: u64,
    kernel_names: KernelNames<'m>,
    /// Bytes of the record being written.
    scratch: Vec<u8>,
}

/// Demangled kernel names, computed once per (process, function).
struct KernelNames<'m> {
    meta: &'m RunMeta,
    cache: HashMap<(u32, u64), String>,
}

impl KernelNames<'_> {
    fn name(&mut self, pid: u32, handle: u64) -> String {
        let meta = self.meta;
        self.cache.entry((pid, handle)).or_insert_with(|| meta.kernel_name(pid, handle)).clone()
    }
}

impl<'m, W: Write> TraceWriter<'m, W> {
    fn begin(mut out: W, meta: &'m RunMeta) -> io::Result<Self> {
        let origin_ns = meta.info.start_mono_ns;
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
        Ok(TraceWriter {
            out,
            first: true,
            origin_ns,
            kernel_names: KernelNames { meta, cache: HashMap::new() },
            scratch: Vec::with_capacity(256),
        })
    }

    fn separator(&mut self) -> io::Result<()> {
        if self.first {
            self.first = false;
            Ok(())
        } else {
            self.out.write_all(b",\n")
        }
    }

    /// µs with ns precision, relative to the run start (JSON `ts` is a float in µs).
    fn micros(&self, ns: u64) -> (i64, u64) {
        let relative = ns as i128 - self.origin_ns as i128;
        let sign = if relative < 0 { -1 } else { 1 };
        let magnitude = relative.unsigned_abs() as u64;
        (sign * (magnitude / 1000) as i64, magnitude % 1000)
    }

    fn metadata(&mut self, kind: &str, pid: u32, tid: u32, name: &str) -> io::Result<()> {
        self.separator()?;
        write!(
            self.out,
            "{{\"ph\":\"M\",\"name\":\"{kind}\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":{}}}}}",
            quoted(name)
        )
    }

    fn counter(&mut self, pid: u32, name: &str, time_ns: u64, args: &str) -> io::Result<()> {
        self.separator()?;
        let (us, frac) = self.micros(time_ns);
        write!(
            self.out,
            "{{\"ph\":\"C\",\"name\":{},\"pid\":{pid},\"ts\":{us}.{frac:03},\"args\":{{{args}}}}}",
            quoted(name)
        )
    }

    fn call(&mut self, func: Func, event: &Event, path: Option<&str>) -> io::Result<()> {
        self.separator()?;
        let (us, frac) = self.micros(event.start);
        let category = match func.api() {
            Api::Libc => match func.class() {
                Class::Map => "mmap",
                Class::Clock => "clock",
                Class::Ioctl => "ioctl",
                _ => "io",
            },
            Api::CudaRuntime => "cuda_runtime",
            Api::CudaDriver => "cuda_driver",
            Api::Nccl => "nccl",
            Api::Itt => return self.itt_event(func, event, us, frac),
        };
        // The common record, written without the formatting machinery (most of a conversion's
        // time otherwise): integers through itoa, fixed parts as bytes.
        self.raw(b"{\"ph\":\"X\",\"name\":\"");
        self.raw(func.name().as_bytes());
        self.raw(b"\",\"cat\":\"");
        self.raw(category.as_bytes());
        self.raw(b"\",\"pid\":");
        self.int(event.pid);
        self.raw(b",\"tid\":");
        self.int(event.tid);
        self.raw(b",\"ts\":");
        self.micros_value(us, frac);
        self.raw(b",\"dur\":");
        self.micros_value((event.dur / 1000) as i64, event.dur % 1000);
        self.raw(b",\"args\":{");
        self.flush_scratch()?;
        if func.api() != Api::Libc {
            return self.gpu_args(func, event);
        }
        self.raw(b"\"fd\":");
        self.int(event.fd);
        self.raw(b",\"ret\":");
        self.int(event.ret);
        if func.moves_bytes() {
            self.raw(b",\"bytes\":");
            self.int(bytes_moved(func, event));
            self.raw(b",\"asked\":");
            self.int(event.arg);
        }
        if event.is_error() {
            self.raw(b",\"errno\":");
            self.int(event.errno);
        }
        match func.class() {
            Class::Map => {
                self.raw(b",\"length\":");
                self.int(event.arg);
            }
            Class::Seek => {
                self.raw(b",\"offset\":");
                self.int(event.arg as i64);
                self.raw(b",\"whence\":");
                self.int(event.extra);
            }
            Class::Clock => {
                self.raw(b",\"clock_id\":");
                self.int(event.extra);
            }
            _ => {}
        }
        self.flush_scratch()?;
        if func.class() == Class::Ioctl {
            write!(self.out, ",\"request\":\"{:#x}\"", event.arg)?;
        }
        if let Some(path) = path {
            self.out.write_all(b",\"path\":")?;
            self.out.write_all(path.as_bytes())?;
        }
        self.out.write_all(b"}}")
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.scratch.extend_from_slice(bytes);
    }

    fn int<I: itoa::Integer>(&mut self, value: I) {
        let mut buffer = itoa::Buffer::new();
        self.scratch.extend_from_slice(buffer.format(value).as_bytes());
    }

    /// `whole.fraction` µs with three decimals (ns precision).
    fn micros_value(&mut self, whole: i64, fraction: u64) {
        self.int(whole);
        self.scratch.push(b'.');
        let digits = [
            b'0' + (fraction / 100 % 10) as u8,
            b'0' + (fraction / 10 % 10) as u8,
            b'0' + (fraction % 10) as u8,
        ];
        self.scratch.extend_from_slice(&digits);
    }

    fn flush_scratch(&mut self) -> io::Result<()> {
        self.out.write_all(&self.scratch)?;
        self.scratch.clear();
        Ok(())
    }

    /// An ITT annotation: a span named after the task or frame, or an instant.
    fn itt_event(&mut self, func: Func, event: &Event, us: i64, frac: u64) -> io::Result<()> {
        let span = IttSpan::from_event(event);
        let meta = self.kernel_names.meta;
        let name = match (func, span.name) {
            (Func::IttPause, _) => "itt pause".to_string(),
            (Func::IttResume, _) => "itt resume".to_string(),
            (_, 0) => func.name().to_string(),
            (_, id) => meta.string(id),
        };
        let domain = if span.domain == 0 { String::new() } else { meta.string(span.domain) };
        let category = quoted(&format!("itt,{domain}"));
        let (name, domain) = (quoted(&name), quoted(&domain));
        if func.class() == Class::Span {
            write!(
                self.out,
                "{{\"ph\":\"X\",\"name\":{name},\"cat\":{category},\"pid\":{},\"tid\":{},\"ts\":{us}.{frac:03},\"dur\":{}.{:03},\"args\":{{\"domain\":{domain},\"id\":{},\"depth\":{}}}}}",
                span.pid,
                span.tid,
                span.dur / 1000,
                span.dur % 1000,
                span.id,
                span.depth
            )?;
            self.batch_flow(&span)
        } else {
            write!(
                self.out,
                "{{\"ph\":\"i\",\"s\":\"t\",\"name\":{name},\"cat\":{category},\"pid\":{},\"tid\":{},\"ts\":{us}.{frac:03},\"args\":{{\"domain\":{domain},\"id\":{}}}}}",
                span.pid, span.tid, span.id
            )
        }
    }

    /// A DataLoader batch's flow arrow: it starts inside the end of the batch's `batch.fetch`
    /// (in the worker) and ends bound to its `batch.wait` (in the main process); both carry
    /// the main pid in `parent` and the batch id in `id`.
    fn batch_flow(&mut self, span: &IttSpan) -> io::Result<()> {
        use crate::pipeline::{DATA, FETCH, WAIT, flow_id};
        if span.domain != DATA || (span.name != FETCH && span.name != WAIT) {
            return Ok(());
        }
        let (phase, at, bind) = if span.name == FETCH {
            ("s", span.start + span.dur.saturating_sub(1), "")
        } else {
            ("f", span.start + span.dur.min(1), ",\"bp\":\"e\"")
        };
        self.separator()?;
        let (us, frac) = self.micros(at);
        write!(
            self.out,
            "{{\"ph\":\"{phase}\",\"name\":\"batch\",\"cat\":\"mlprof.data.flow\",\"id\":{},\"pid\":{},\"tid\":{},\"ts\":{us}.{frac:03}{bind},\"args\":{{\"batch_id\":{},\"main_pid\":{}}}}}",
            flow_id(span.parent, span.id),
            span.pid,
            span.tid,
            span.id,
            span.parent
        )
    }

    /// Arguments of a CUDA/NCCL call (see `GpuCall` for the field meanings).
    fn gpu_args(&mut self, func: Func, event: &Event) -> io::Result<()> {
        let call = GpuCall::from_event(event);
        write!(self.out, "\"status\":{},\"device\":{}", call.status, call.device)?;
        if call.stream != 0 {
            write!(self.out, ",\"stream\":\"{:#x}\"", call.stream)?;
        }
        if call.flags & FLAG_NESTED != 0 {
            self.out.write_all(b",\"nested\":true")?;
        }
        match func.class() {
            Class::Launch => {
                let (gx, gy, gz) = call.grid();
                let (bx, by, bz) = call.block();
                let kernel = quoted(&self.kernel_names.name(call.pid, call.object));
                write!(
                    self.out,
                    ",\"kernel\":{kernel},\"grid\":[{gx},{gy},{gz}],\"block\":[{bx},{by},{bz}]"
                )?;
            }
            Class::Copy => write!(
                self.out,
                ",\"bytes\":{},\"direction\":\"{}\"",
                call.arg,
                copy_direction_name(call.aux)
            )?,
            Class::Memset => write!(self.out, ",\"bytes\":{}", call.arg)?,
            Class::Alloc => write!(self.out, ",\"bytes\":{},\"ptr\":\"{:#x}\"", call.arg, call.object)?,
            Class::Free => write!(self.out, ",\"ptr\":\"{:#x}\"", call.object)?,
            Class::Collective => {
                let datatype = call.aux & 0xff;
                write!(
                    self.out,
                    ",\"count\":{},\"datatype\":\"{}\",\"bytes\":{},\"comm\":\"{:#x}\"",
                    call.arg,
                    nccl_datatype_name(datatype),
                    bytes_moved(func, event),
                    call.object
                )?;
                let op = (call.aux >> 8) & 0xff;
                if op != 0xff {
                    write!(self.out, ",\"op\":\"{}\"", nccl_op_name(op))?;
                }
                if matches!(func, Func::NcclSend | Func::NcclRecv) {
                    write!(self.out, ",\"peer\":{}", call.aux >> 16)?;
                } else if matches!(func, Func::NcclBroadcast | Func::NcclReduce) {
                    write!(self.out, ",\"root\":{}", call.aux >> 16)?;
                }
            }
            Class::Comm => write!(
                self.out,
                ",\"ranks\":{},\"rank\":{},\"comm\":\"{:#x}\"",
                call.arg, call.aux, call.object
            )?,
            Class::SetDevice => write!(self.out, ",\"set_device\":{}", call.arg)?,
            Class::GpuSync | Class::GpuEvent | Class::GraphLaunch if call.object != 0 => {
                write!(self.out, ",\"object\":\"{:#x}\"", call.object)?
            }
            _ => {}
        }
        self.out.write_all(b"}}")
    }

    fn finish(mut self) -> io::Result<()> {
        self.out.write_all(b"\n]}\n")?;
        self.out.flush()
    }
}

pub fn convert(input: &Path, output: &Path, progress: bool) -> Result<ConvertStats, String> {
    let meta = RunMeta::load(input)?;
    for warning in &meta.warnings {
        eprintln!("mlprof: warning: {warning}");
    }
    let total_bytes = std::fs::metadata(input).map(|m| m.len()).unwrap_or(0);
    let file = File::create(output).map_err(|e| format!("cannot write {}: {e}", output.display()))?;
    let io_err = |e: io::Error| format!("writing {}: {e}", output.display());
    let mut trace = TraceWriter::begin(BufWriter::with_capacity(1 << 20, file), &meta).map_err(io_err)?;

    write_metadata(&mut trace, &meta).map_err(io_err)?;
    // Escaped paths, computed once per path.
    let mut escaped: HashMap<u64, String> = HashMap::new();
    let mut reader = run::open(input)?;
    let mut events = 0u64;
    let started = Instant::now();
    let mut next_report = started + Duration::from_secs(1);
    let mut energy_tracks = crate::energy::tracks::EnergyTrace::default();
    while let Some(frame) = reader.next_frame().map_err(|e| format!("{}: {e}", input.display()))? {
        match frame {
            Frame::Events(batch) => {
                for event in batch {
                    let Some(func) = Func::from_id(event.kind) else {
                        continue;
                    };
                    let path = meta
                        .fds
                        .path_of(&meta, event)
                        .map(|id| escaped.entry(id).or_insert_with(|| quoted(&meta.string(id))).as_str());
                    trace.call(func, event, path).map_err(io_err)?;
                    events += 1;
                }
                if progress && Instant::now() >= next_report {
                    next_report += Duration::from_secs(1);
                    let done = reader.offset() as f64 * 100.0 / total_bytes.max(1) as f64;
                    eprintln!("mlprof convert: {events} events ({done:.0}%)");
                }
            }
            Frame::Aggregates(samples) => write_aggregates(&mut trace, &samples).map_err(io_err)?,
            Frame::Drops(samples) => write_drops(&mut trace, &samples).map_err(io_err)?,
            Frame::EnergyDevice(device) => {
                write_energy(&mut trace, energy_tracks.device(&device)).map_err(io_err)?
            }
            Frame::EnergySamples(samples) => {
                write_energy(&mut trace, energy_tracks.samples(&samples)).map_err(io_err)?
            }
            _ => {}
        }
    }
    trace.finish().map_err(io_err)?;
    let bytes = std::fs::metadata(output).map(|m| m.len()).unwrap_or(0);
    Ok(ConvertStats { events, bytes })
}

fn write_metadata<W: Write>(trace: &mut TraceWriter<'_, W>, meta: &RunMeta) -> io::Result<()> {
    let mut pids: Vec<_> = meta.images.iter().collect();
    pids.sort_by_key(|(pid, _)| **pid);
    for (pid, images) in pids {
        let names: Vec<String> = images.iter().map(|i| i.info.argv.join(" ")).collect();
        let label = format!("{} (pid {pid})", names.join(" → exec "));
        trace.metadata("process_name", *pid, 0, &label)?;
    }
    let mut threads: Vec<_> = meta.threads.iter().collect();
    threads.sort();
    for ((pid, tid), name) in threads {
        trace.metadata("thread_name", *pid, *tid, &format!("{name} ({tid})"))?;
    }
    Ok(())
}

fn write_aggregates<W: Write>(trace: &mut TraceWriter<'_, W>, samples: &[AggregateSample]) -> io::Result<()> {
    for sample in samples {
        let Some(func) = Func::from_id(sample.func) else {
            continue;
        };
        let name = match sample.clock_id {
            Some(clock) => format!("{} calls (clock {clock}, tid {})", func.name(), sample.tid),
            None => format!("{} calls (tid {})", func.name(), sample.tid),
        };
        trace.counter(sample.pid, &name, sample.time_ns, &format!("\"count\":{}", sample.count))?;
    }
    Ok(())
}

fn write_drops<W: Write>(trace: &mut TraceWriter<'_, W>, samples: &[DropSample]) -> io::Result<()> {
    for sample in samples {
        let name = if sample.stream == 0 {
            "dropped records (no free lane)".to_string()
        } else {
            format!("dropped records (tid {})", sample.tid)
        };
        trace.counter(sample.pid, &name, sample.time_ns, &format!("\"dropped\":{}", sample.dropped))?;
    }
    Ok(())
}

/// Energy, power, utilization, clock, memory and temperature tracks: one pseudo-process per
/// device (`crate::energy::TRACK_PID_BASE` + device id), on the events' time axis.
fn write_energy<W: Write>(
    trace: &mut TraceWriter<'_, W>,
    items: Vec<crate::energy::tracks::TraceItem>,
) -> io::Result<()> {
    for item in items {
        match item {
            crate::energy::tracks::TraceItem::ProcessName { pid, name } => {
                trace.metadata("process_name", pid, 0, &name)?
            }
            crate::energy::tracks::TraceItem::Counter { pid, name, time_ns, args } => {
                trace.counter(pid, name, time_ns, &args)?
            }
        }
    }
    Ok(())
}
