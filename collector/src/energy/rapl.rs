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
    use crate::testing::TempDir;

    /// A powercap folder in the temporary directory, laid out like `/sys/class/powercap`
    /// (every zone a folder of its own at the top, sub-zones included), removed when dropped.
    struct FakePowercap(TempDir);

    impl FakePowercap {
        fn new(tag: &str) -> FakePowercap {
            FakePowercap(TempDir::new(&format!("powercap-{tag}")))
        }

        /// Zone folder `zone` named `name`, its counter at `energy_uj`, wrapping at
        /// `max_energy_range_uj` when given.
        fn zone(&self, zone: &str, name: &str, energy_uj: &str, max_energy_range_uj: Option<u64>) {
            let path = self.0.path().join(zone);
            std::fs::create_dir_all(&path).unwrap();
            std::fs::write(path.join("name"), format!("{name}\n")).unwrap();
            std::fs::write(path.join("energy_uj"), energy_uj).unwrap();
            if let Some(range) = max_energy_range_uj {
                std::fs::write(path.join("max_energy_range_uj"), format!("{range}\n")).unwrap();
            }
        }

        /// Sets zone `zone`'s counter, as the kernel's next reading would show it.
        fn set_energy(&self, zone: &str, energy_uj: &str) {
            std::fs::write(self.0.path().join(zone).join("energy_uj"), energy_uj).unwrap();
        }
    }

    /// (zone folder, kind, package, id) of each zone found.
    fn found(zones: &[RaplZone]) -> Vec<(&str, &str, u32, u32)> {
        zones.iter().map(|z| (z.zone.as_str(), z.kind, z.package, z.id)).collect()
    }

    #[test]
    fn rapl_wraparound() {
        assert_eq!(unwrap_delta(100, 250, 1000), 150);
        assert_eq!(unwrap_delta(900, 50, 1000), 150);
        assert_eq!(unwrap_delta(900, 50, 0), 0);
    }

    #[test]
    fn zones_are_the_packages_and_their_dram_in_numeric_order() {
        let powercap = FakePowercap::new("order");
        // Two sockets, the second listed as 10 so that a sort by name would put it first.
        powercap.zone("intel-rapl:10", "package-1", "7\n", Some(1000));
        powercap.zone("intel-rapl:0", "package-0", "5\n", Some(1000));
        // Package 0's sub-zones: its cores and uncore are inside the package's figure (not
        // devices of their own); its DRAM is not, and belongs to package 0 by its folder name.
        powercap.zone("intel-rapl:0:0", "core", "1\n", None);
        powercap.zone("intel-rapl:0:1", "uncore", "1\n", None);
        powercap.zone("intel-rapl:0:2", "dram", "3\n", None);
        // The control type's own folder and the MMIO interface's zone are not RAPL zones here.
        std::fs::create_dir_all(powercap.0.path().join("intel-rapl")).unwrap();
        powercap.zone("intel-rapl-mmio:0", "package-0", "9\n", None);
        let (zones, why) = rapl_zones(powercap.0.path());
        assert_eq!(why, None);
        // Ids count the zones kept, in the order of their numbers: 0, 0:2, 10.
        assert_eq!(
            found(&zones),
            [
                ("intel-rapl:0", DEVICE_CPU_PACKAGE, 0, CPU_DEVICE_ID_BASE),
                ("intel-rapl:0:2", DEVICE_CPU_DRAM, 0, CPU_DEVICE_ID_BASE + 1),
                ("intel-rapl:10", DEVICE_CPU_PACKAGE, 1, CPU_DEVICE_ID_BASE + 2),
            ]
        );
        // A zone without `max_energy_range_uj` has no range to unwrap with.
        assert_eq!(zones.iter().map(|z| z.max_range_uj).collect::<Vec<_>>(), [1000, 0, 1000]);
    }

    #[test]
    fn each_zone_is_announced_as_a_device_of_the_run() {
        let powercap = FakePowercap::new("devices");
        powercap.zone("intel-rapl:0", "package-0", "5\n", Some(1000));
        powercap.zone("intel-rapl:0:2", "dram", "3\n", Some(1000));
        let (tx, rx) = mpsc::channel();
        let mut missing = Vec::new();
        let zones = open_zones(powercap.0.path(), 10_000_000, &tx, &mut missing);
        assert_eq!(zones.len(), 2);
        assert!(missing.is_empty(), "{missing:?}");
        let devices: Vec<EnergyDevice> = rx
            .try_iter()
            .map(|msg| match msg {
                Msg::Device(device) => device,
                _ => panic!("only devices are announced"),
            })
            .collect();
        let named: Vec<(u32, &str, &str, &str, bool, u64)> = devices
            .iter()
            .map(|d| {
                (d.id, d.name.as_str(), d.uuid.as_str(), d.energy_source.as_str(), d.in_run, d.interval_ns)
            })
            .collect();
        assert_eq!(
            named,
            [
                (CPU_DEVICE_ID_BASE, "CPU package 0", "intel-rapl:0", SOURCE_RAPL, true, 10_000_000),
                (CPU_DEVICE_ID_BASE + 1, "CPU 0 DRAM", "intel-rapl:0:2", SOURCE_RAPL, true, 10_000_000),
            ]
        );
    }

    #[test]
    fn a_zone_whose_counter_cannot_be_read_is_left_out_and_said() {
        let powercap = FakePowercap::new("unreadable");
        // A counter that is no number, one that is a folder (reading it fails), one missing.
        powercap.zone("intel-rapl:0", "package-0", "lots\n", None);
        powercap.zone("intel-rapl:1", "package-1", "", None);
        std::fs::remove_file(powercap.0.path().join("intel-rapl:1/energy_uj")).unwrap();
        std::fs::create_dir(powercap.0.path().join("intel-rapl:1/energy_uj")).unwrap();
        powercap.zone("intel-rapl:2", "package-2", "", None);
        std::fs::remove_file(powercap.0.path().join("intel-rapl:2/energy_uj")).unwrap();
        let (zones, why) = rapl_zones(powercap.0.path());
        assert!(zones.is_empty());
        let why = why.unwrap();
        for zone in ["intel-rapl:0", "intel-rapl:1", "intel-rapl:2"] {
            assert!(why.contains(&format!("{zone}/energy_uj: ")), "{zone} in {why}");
        }
        // With one readable zone, that one is kept and the others are not reported as missing.
        powercap.zone("intel-rapl:3", "package-3", "11\n", None);
        let (zones, why) = rapl_zones(powercap.0.path());
        assert_eq!(
            (found(&zones), why),
            (vec![("intel-rapl:3", DEVICE_CPU_PACKAGE, 3, CPU_DEVICE_ID_BASE)], None)
        );
    }

    #[test]
    fn no_zone_says_why() {
        let powercap = FakePowercap::new("none");
        let (zones, why) = rapl_zones(powercap.0.path());
        assert!(zones.is_empty());
        assert_eq!(why, Some(format!("no RAPL package zone under {}", powercap.0.path().display())));
        let absent = powercap.0.path().join("absent");
        let (zones, why) = rapl_zones(&absent);
        assert!(zones.is_empty());
        let why = why.unwrap();
        assert!(why.starts_with(&format!("{}: ", absent.display())), "{why}");
        let (tx, _rx) = mpsc::channel();
        let mut missing = Vec::new();
        assert!(open_zones(&absent, 10_000_000, &tx, &mut missing).is_empty());
        assert_eq!(missing, [format!("no CPU energy ({why})")]);
    }

    #[test]
    fn the_total_counts_from_the_first_reading_across_wraps_of_the_counter() {
        let powercap = FakePowercap::new("wrap");
        // The counter wraps at 2000 µJ.
        powercap.zone("intel-rapl:0", "package-0", "1000\n", Some(2000));
        let (mut zones, _) = rapl_zones(powercap.0.path());
        let zone = &mut zones[0];
        let (tx, rx) = mpsc::channel();
        let mut batch = Vec::new();
        let mut read = |zone: &mut RaplZone, energy_uj: &str| {
            powercap.set_energy("intel-rapl:0", energy_uj);
            let before = batch.len();
            zone.sample(&mut batch, &tx);
            batch.get(before).map(|s: &EnergySample| s.energy_uj.unwrap())
        };
        // The first reading is the zero of the run's total.
        assert_eq!(read(zone, "1000\n"), Some(0));
        assert_eq!(read(zone, "1500\n"), Some(500));
        // 1500 → 100 went past the top: 500 µJ up to 2000, then 100 more.
        assert_eq!(read(zone, "100\n"), Some(1100));
        // A counter caught half-written (not a number) is skipped, not a failure.
        assert_eq!(read(zone, ""), None);
        assert_eq!(read(zone, "300\n"), Some(1300));
        assert!(!zone.failed);
        assert!(batch.iter().all(|s| s.device == CPU_DEVICE_ID_BASE && s.power_mw.is_none()));
        assert!(batch.windows(2).all(|w| w[0].time_ns <= w[1].time_ns), "stamped as read");
        assert!(rx.try_recv().is_err(), "no note");
    }
}
