//! The energy counter tracks of `mlprof convert`: energy, power, utilization, clocks, memory
//! and temperature, one pseudo-process per device (`TRACK_PID_BASE` + device id).

use std::collections::HashMap;

use mlprof_format::energy::{DEVICE_CPU_DRAM, DEVICE_CPU_PACKAGE, DEVICE_GPU, EnergyDevice, EnergySample};

use super::TRACK_PID_BASE;

/// What `mlprof convert` writes for energy frames.
pub enum TraceItem {
    /// `process_name` of a device's pseudo-process.
    ProcessName {
        pid: u32,
        name: String,
    },
    Counter {
        pid: u32,
        name: &'static str,
        time_ns: u64,
        args: String,
    },
}

/// Turns energy frames into counter tracks, one pseudo-process per device.
#[derive(Default)]
pub struct EnergyTrace {
    /// Per device: last (time, energy µJ) where the energy changed.
    last_change: HashMap<u32, (u64, u64)>,
    kinds: HashMap<u32, String>,
}

impl EnergyTrace {
    pub fn device(&mut self, device: &EnergyDevice) -> Vec<TraceItem> {
        self.kinds.insert(device.id, device.kind.clone());
        let label = match device.kind.as_str() {
            DEVICE_GPU => format!("GPU {}: {}", device.index, device.name),
            DEVICE_CPU_PACKAGE | DEVICE_CPU_DRAM => device.name.clone(),
            _ => device.name.clone(),
        };
        let suffix = if device.in_run { "" } else { " (not in run)" };
        vec![TraceItem::ProcessName { pid: TRACK_PID_BASE + device.id, name: format!("{label}{suffix}") }]
    }

    pub fn samples(&mut self, samples: &[EnergySample]) -> Vec<TraceItem> {
        let mut items = Vec::new();
        for s in samples {
            let pid = TRACK_PID_BASE + s.device;
            if let Some(e) = s.energy_uj {
                match self.last_change.get(&s.device).copied() {
                    None => {
                        self.last_change.insert(s.device, (s.time_ns, e));
                        items.push(TraceItem::Counter {
                            pid,
                            name: "energy J",
                            time_ns: s.time_ns,
                            args: format!("\"J\":{:.6}", e as f64 / 1e6),
                        });
                    }
                    Some((t0, e0)) if e != e0 && s.time_ns > t0 => {
                        let watts = (e.saturating_sub(e0)) as f64 / (s.time_ns - t0) as f64 * 1e3;
                        self.last_change.insert(s.device, (s.time_ns, e));
                        items.push(TraceItem::Counter {
                            pid,
                            name: "energy J",
                            time_ns: s.time_ns,
                            args: format!("\"J\":{:.6}", e as f64 / 1e6),
                        });
                        items.push(TraceItem::Counter {
                            pid,
                            name: "power W",
                            time_ns: t0,
                            args: format!("\"W\":{watts:.3}"),
                        });
                    }
                    _ => {}
                }
            }
            if let Some(mw) = s.power_mw {
                let args = format!("\"W\":{:.3}", mw as f64 / 1e3);
                items.push(TraceItem::Counter {
                    pid,
                    name: "power W (NVML reading)",
                    time_ns: s.time_ns,
                    args,
                });
            }
            if let Some(u) = s.gpu_util {
                items.push(TraceItem::Counter {
                    pid,
                    name: "GPU utilization %",
                    time_ns: s.time_ns,
                    args: format!("\"%\":{u}"),
                });
            }
            if let Some(u) = s.mem_util {
                items.push(TraceItem::Counter {
                    pid,
                    name: "memory utilization %",
                    time_ns: s.time_ns,
                    args: format!("\"%\":{u}"),
                });
            }
            if let Some(c) = s.sm_clock_mhz {
                items.push(TraceItem::Counter {
                    pid,
                    name: "SM clock MHz",
                    time_ns: s.time_ns,
                    args: format!("\"MHz\":{c}"),
                });
            }
            if let Some(m) = s.mem_used_bytes {
                let args = format!("\"GB\":{:.3}", m as f64 / 1e9);
                items.push(TraceItem::Counter { pid, name: "memory used GB", time_ns: s.time_ns, args });
            }
            if let Some(t) = s.temperature_c {
                items.push(TraceItem::Counter {
                    pid,
                    name: "temperature C",
                    time_ns: s.time_ns,
                    args: format!("\"C\":{t}"),
                });
            }
        }
        items
    }
}
