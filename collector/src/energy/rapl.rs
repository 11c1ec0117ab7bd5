//! CPU packages and DRAM through Linux powercap (RAPL): the zones under the powercap folder,
//! and each zone's cumulative energy, unwrapped where its counter wraps.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::mpsc;

use mlprof_format::energy::{
    CPU_DEVICE_ID_BASE, DEVICE_CPU_DRAM, DEVICE_CPU_PACKAGE, EnergyDevice, EnergySample, SOURCE_RAPL,
};

use super::{Msg, note};
use crate::timebase::monotonic_ns;

pub(super) struct RaplZone {
    zone: String,
    kind: &'static str,
    package: u32,
    file: File,
    max_range_uj: u64,
    last_uj: Option<u64>,
    total_uj: u64,
    id: u32,
    failed: bool,
}

/// Cumulative energy across a counter that wraps at `max_range` (the powercap
/// `max_energy_range_uj`): a reading below the previous one means one wrap.
pub fn unwrap_delta(previous: u64, now: u64, max_range: u64) -> u64 {
    if now >= previous {
        now - previous
    } else if max_range >= previous {
        max_range - previous + now
    } else {
        // No usable range: count from the new reading on.
        0
    }
}

fn read_u64(file: &File) -> io::Result<u64> {
    let mut buf = [0u8; 32];
    let n = file.read_at(&mut buf, 0)?;
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a number"))
}

/// The package and DRAM zones under `dir`, each announced to the writer; why there are none
/// goes to `missing`.
pub(super) fn open_zones(
    dir: &Path,
    interval_ns: u64,
    tx: &mpsc::Sender<Msg>,
    missing: &mut Vec<String>,
) -> Vec<RaplZone> {
    let (zones, why_no_cpu) = rapl_zones(dir);
    for device in rapl_devices(&zones, interval_ns) {
        let _ = tx.send(Msg::Device(device));
    }
    if let Some(why) = why_no_cpu {
        missing.push(format!("no CPU energy ({why})"));
    }
    zones
}

/// The package and DRAM zones under `dir`, and why there are none when there are none.
fn rapl_zones(dir: &Path) -> (Vec<RaplZone>, Option<String>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return (Vec::new(), Some(format!("{}: {e}", dir.display()))),
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("intel-rapl:"))
        .collect();
    names.sort_by_key(|n| {
        n.split(':').skip(1).map(|p| p.parse::<u32>().unwrap_or(u32::MAX)).collect::<Vec<_>>()
    });
    let mut zones = Vec::new();
    let mut problems = Vec::new();
    for zone in names {
        let path = dir.join(&zone);
        let name =
            std::fs::read_to_string(path.join("name")).map(|s| s.trim().to_string()).unwrap_or_default();
        let (kind, package) = if let Some(n) = name.strip_prefix("package-") {
            (DEVICE_CPU_PACKAGE, n.parse().unwrap_or(0))
        } else if name == "dram" {
            let package = zone.split(':').nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
            (DEVICE_CPU_DRAM, package)
        } else {
            continue;
        };
        let file = match File::open(path.join("energy_uj")) {
            Ok(f) => f,
            Err(e) => {
                problems.push(format!("{}/energy_uj: {e}", path.display()));
                continue;
            }
        };
        if let Err(e) = read_u64(&file) {
            {
                problems.push(format!("{}/energy_uj: {e}", path.display()));
                continue;
            }
        };
        let max_range_uj = std::fs::read_to_string(path.join("max_energy_range_uj"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        let id = CPU_DEVICE_ID_BASE + zones.len() as u32;
        zones.push(RaplZone {
            zone,
            kind,
            package,
            file,
            max_range_uj,
            last_uj: None,
            total_uj: 0,
            id,
            failed: false,
        });
    }
    let why = if zones.is_empty() {
        Some(if problems.is_empty() {
            format!("no RAPL package zone under {}", dir.display())
        } else {
            problems.join(", ")
        })
    } else {
        None
    };
    (zones, why)
}

fn rapl_devices(zones: &[RaplZone], interval_ns: u64) -> Vec<EnergyDevice> {
    zones
        .iter()
        .map(|z| EnergyDevice {
            id: z.id,
            kind: z.kind.into(),
            index: z.package,
            uuid: z.zone.clone(),
            name: if z.kind == DEVICE_CPU_DRAM {
                format!("CPU {} DRAM", z.package)
            } else {
                format!("CPU package {}", z.package)
            },
            in_run: true,
            energy_source: SOURCE_RAPL.into(),
            interval_ns,
        })
        .collect()
}

impl RaplZone {
    pub(super) fn sample(&mut self, batch: &mut Vec<EnergySample>, tx: &mpsc::Sender<Msg>) {
        if self.failed {
            return;
        }
        let time_ns = monotonic_ns();
        let now = match read_u64(&self.file) {
            Ok(v) => v,
            // Caught between a rewrite's truncation and its write (a test's fake zone): skip.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => return,
            Err(e) => {
                self.failed = true;
                note(
                    tx,
                    Some(self.id),
                    "error",
                    format!("{}: energy_uj unreadable ({e}); no longer sampled", self.zone),
                );
                return;
            }
        };
        if let Some(previous) = self.last_uj {
            self.total_uj += unwrap_delta(previous, now, self.max_range_uj);
        }
        self.last_uj = Some(now);
        batch.push(EnergySample {
            device: self.id,
            time_ns,
            energy_uj: Some(self.total_uj),
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rapl_wraparound() {
        assert_eq!(unwrap_delta(100, 250, 1000), 150);
        assert_eq!(unwrap_delta(900, 50, 1000), 150);
        assert_eq!(unwrap_delta(900, 50, 0), 0);
    }
}
