//! The energy counter tracks of a trace: cumulative energy, power from the energy counter, the
//! driver's power reading, utilization, SM clock, memory used and temperature, on one
//! pseudo-process per device (`TRACK_PID_BASE` + device id, named `GPU 0: NAME` or after the
//! CPU zone), on the events' time axis.

use std::collections::HashMap;
use std::io;

use mlprof_format::energy::{DEVICE_GPU, EnergyDevice, EnergySample};
use mlprof_trace::{CounterHandle, CounterUnit, CounterValue, ProcessHandle, TraceWriter};

use super::TRACK_PID_BASE;

/// The series a device can have, each a counter track.
#[derive(Clone, Copy)]
enum Series {
    Energy,
    /// From consecutive energy counter values.
    Power,
    /// The driver's own (averaged) reading.
    PowerReading,
    GpuUtilization,
    MemoryUtilization,
    SmClock,
    MemoryUsed,
    Temperature,
}

const SERIES: usize = 8;

impl Series {
    /// Track name, and the value's unit with the decimals its source is good for.
    fn describe(self) -> (&'static str, CounterUnit) {
        let unit = |name, decimals| CounterUnit { name, decimals };
        match self {
            Series::Energy => ("energy J", unit("J", 6)),
            Series::Power => ("power W", unit("W", 3)),
            Series::PowerReading => ("power W (NVML reading)", unit("W", 3)),
            Series::GpuUtilization => ("GPU utilization %", unit("%", 0)),
            Series::MemoryUtilization => ("memory utilization %", unit("%", 0)),
            Series::SmClock => ("SM clock MHz", unit("MHz", 0)),
            Series::MemoryUsed => ("memory used GB", unit("GB", 3)),
            Series::Temperature => ("temperature C", unit("C", 0)),
        }
    }
}

struct DeviceTracks {
    process: ProcessHandle,
    /// Declared on first use, indexed by `Series as usize`.
    counters: [Option<CounterHandle>; SERIES],
    /// Last (time, energy µJ) where the energy changed: power is the slope between changes.
    last_change: Option<(u64, u64)>,
}

/// Turns energy frames into counter tracks as they stream by.
#[derive(Default)]
pub(crate) struct EnergyTracks {
    devices: HashMap<u32, DeviceTracks>,
}

impl EnergyTracks {
    /// A device frame: names the device's pseudo-process.
    pub(crate) fn device<W: TraceWriter>(&mut self, device: &EnergyDevice, out: &mut W) -> io::Result<()> {
        let label = match device.kind.as_str() {
            DEVICE_GPU => format!("GPU {}: {}", device.index, device.name),
            _ => device.name.clone(),
        };
        let suffix = if device.in_run { "" } else { " (not in run)" };
        let process = out.process(TRACK_PID_BASE + device.id, Some(&format!("{label}{suffix}")))?;
        self.devices.entry(device.id).or_insert_with(|| DeviceTracks::new(process));
        Ok(())
    }

    /// A batch of samples: a counter value per series each sample has.
    pub(crate) fn samples<W: TraceWriter>(
        &mut self,
        samples: &[EnergySample],
        out: &mut W,
    ) -> io::Result<()> {
        for s in samples {
            let tracks = match self.devices.entry(s.device) {
                std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
                // Samples of a device never described: its track has no name.
                std::collections::hash_map::Entry::Vacant(entry) => {
                    entry.insert(DeviceTracks::new(out.process(TRACK_PID_BASE + s.device, None)?))
                }
            };
            let time = s.time_ns;
            if let Some(e) = s.energy_uj {
                let joules = CounterValue::Double(e as f64 / 1e6);
                match tracks.last_change {
                    None => {
                        tracks.last_change = Some((time, e));
                        tracks.value(out, Series::Energy, time, joules)?;
                    }
                    Some((t0, e0)) if e != e0 && time > t0 => {
                        let watts = (e.saturating_sub(e0)) as f64 / (time - t0) as f64 * 1e3;
                        tracks.last_change = Some((time, e));
                        tracks.value(out, Series::Energy, time, joules)?;
                        // The power between the two changes, from the earlier one on.
                        tracks.value(out, Series::Power, t0, CounterValue::Double(watts))?;
                    }
                    _ => {}
                }
            }
            if let Some(mw) = s.power_mw {
                tracks.value(out, Series::PowerReading, time, CounterValue::Double(mw as f64 / 1e3))?;
            }
            if let Some(u) = s.gpu_util {
                tracks.value(out, Series::GpuUtilization, time, CounterValue::UInt(u.into()))?;
            }
            if let Some(u) = s.mem_util {
                tracks.value(out, Series::MemoryUtilization, time, CounterValue::UInt(u.into()))?;
            }
            if let Some(c) = s.sm_clock_mhz {
                tracks.value(out, Series::SmClock, time, CounterValue::UInt(c.into()))?;
            }
            if let Some(m) = s.mem_used_bytes {
                tracks.value(out, Series::MemoryUsed, time, CounterValue::Double(m as f64 / 1e9))?;
            }
            if let Some(t) = s.temperature_c {
                tracks.value(out, Series::Temperature, time, CounterValue::UInt(t.into()))?;
            }
        }
        Ok(())
    }
}

impl DeviceTracks {
    fn new(process: ProcessHandle) -> Self {
        DeviceTracks { process, counters: [None; SERIES], last_change: None }
    }

    fn value<W: TraceWriter>(
        &mut self,
        out: &mut W,
        series: Series,
        time_ns: u64,
        value: CounterValue,
    ) -> io::Result<()> {
        let track = match self.counters[series as usize] {
            Some(track) => track,
            None => {
                let (name, unit) = series.describe();
                let track = out.counter_track(self.process, name, unit)?;
                self.counters[series as usize] = Some(track);
                track
            }
        };
        out.counter(track, time_ns, value)
    }
}
