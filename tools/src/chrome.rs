//! `mlprof convert`: Chrome Trace Event Format JSON, streamed: one pass for metadata, one for
//! the events, each event written as it is read. Memory holds the metadata (processes, strings,
//! fd tables), never the events.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use mlprof_format::func::{Class, Func};
use mlprof_format::record::Event;
use mlprof_format::runfile::{AggregateSample, DropSample, Frame};

use crate::run::{self, FdTables, RunMeta, bytes_moved};

pub struct ConvertStats {
    pub events: u64,
    pub bytes: u64,
}

/// JSON string literal (with quotes).
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"?\"".into())
}

struct TraceWriter<W: Write> {
    out: W,
    first: bool,
    origin_ns: u64,
}

impl<W: Write> TraceWriter<W> {
    fn begin(mut out: W, origin_ns: u64) -> io::Result<Self> {
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
        Ok(TraceWriter { out, first: true, origin_ns })
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
        let category = match func.class() {
            Class::Open | Class::Read | Class::Write | Class::Close | Class::Seek | Class::Sync => "io",
            Class::Map => "mmap",
            Class::Clock => "clock",
            Class::Ioctl => "ioctl",
        };
        write!(
            self.out,
            "{{\"ph\":\"X\",\"name\":\"{}\",\"cat\":\"{category}\",\"pid\":{},\"tid\":{},\"ts\":{us}.{frac:03},\"dur\":{}.{:03},\"args\":{{\"fd\":{},\"ret\":{}",
            func.name(),
            event.pid,
            event.tid,
            event.dur / 1000,
            event.dur % 1000,
            event.fd,
            event.ret
        )?;
        if func.moves_bytes() {
            write!(self.out, ",\"bytes\":{},\"asked\":{}", bytes_moved(func, event), event.arg)?;
        }
        if event.is_error() {
            write!(self.out, ",\"errno\":{}", event.errno)?;
        }
        match func.class() {
            Class::Ioctl => write!(self.out, ",\"request\":\"{:#x}\"", event.arg)?,
            Class::Map => write!(self.out, ",\"length\":{}", event.arg)?,
            Class::Seek => write!(self.out, ",\"offset\":{},\"whence\":{}", event.arg as i64, event.extra)?,
            Class::Clock => write!(self.out, ",\"clock_id\":{}", event.extra)?,
            _ => {}
        }
        if let Some(path) = path {
            write!(self.out, ",\"path\":{path}")?;
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
    let mut trace = TraceWriter::begin(BufWriter::with_capacity(1 << 20, file), meta.info.start_mono_ns)
        .map_err(io_err)?;

    write_metadata(&mut trace, &meta).map_err(io_err)?;
    // Escaped paths, computed once per path.
    let mut escaped: HashMap<u64, String> = HashMap::new();
    let mut fds = FdTables::default();
    let mut reader = run::open(input)?;
    let mut events = 0u64;
    let started = Instant::now();
    let mut next_report = started + Duration::from_secs(1);
    while let Some(frame) = reader.next_frame().map_err(|e| format!("{}: {e}", input.display()))? {
        match frame {
            Frame::Events(batch) => {
                for event in batch {
                    let Some(func) = Func::from_id(event.kind) else {
                        continue;
                    };
                    let path = fds
                        .observe(&meta, event)
                        .map(|id| escaped.entry(id).or_insert_with(|| quoted(&meta.path(id))).as_str());
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
            _ => {}
        }
    }
    trace.finish().map_err(io_err)?;
    let bytes = std::fs::metadata(output).map(|m| m.len()).unwrap_or(0);
    Ok(ConvertStats { events, bytes })
}

fn write_metadata<W: Write>(trace: &mut TraceWriter<W>, meta: &RunMeta) -> io::Result<()> {
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

fn write_aggregates<W: Write>(trace: &mut TraceWriter<W>, samples: &[AggregateSample]) -> io::Result<()> {
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

fn write_drops<W: Write>(trace: &mut TraceWriter<W>, samples: &[DropSample]) -> io::Result<()> {
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
