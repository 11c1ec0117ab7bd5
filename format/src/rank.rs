//! A process's rank in a distributed job, as its launcher put it in the environment.
//!
//! libmlprof.so reads the variables with `getenv` when a process image announces itself (a
//! cold path: no allocation, no system call) and sends them as a [`KIND_PROCESS_RANK`] ring
//! record just before the image's [`KIND_PROCESS_START`]; the collector stores them in the
//! image's [`ProcessInfo::rank`](crate::runfile::ProcessInfo::rank). The process itself reads
//! them because the collector cannot: a short-lived process's `/proc/PID/environ` may be gone
//! (or another user's) by the time it looks.
//!
//! Which variable names the rank, first match wins ([`RANK_SOURCES`]):
//!
//! | launcher | rank | local rank | world size | local world size | node |
//! |---|---|---|---|---|---|
//! | torchrun / torch.distributed | `RANK` | `LOCAL_RANK` | `WORLD_SIZE` | `LOCAL_WORLD_SIZE` | `GROUP_RANK` |
//! | Open MPI | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_LOCAL_RANK` | `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_SIZE` | – |
//! | MPICH / PMI | `PMI_RANK` | `MPI_LOCALRANKID` | `PMI_SIZE` | `MPI_LOCALNRANKS` | – |
//! | Slurm (`srun`) | `SLURM_PROCID` | `SLURM_LOCALID` | `SLURM_NTASKS` | – | `SLURM_NODEID` |
//!
//! A node left unnamed falls back to `SLURM_NODEID`. `SLURM_PROCID` counts only when none of
//! the others is set: under `srun torchrun …` it is the launcher's task number, not the rank.
//!
//! Children inherit the environment, so a DataLoader worker (a fork, or a spawned interpreter)
//! reports its main process's rank; readers mark a process whose parent has the same rank as
//! a child of that rank (`mlprof_report::run::RunMeta::rank_main`), not as a second rank.
//!
//! [`KIND_PROCESS_RANK`]: crate::record::KIND_PROCESS_RANK
//! [`KIND_PROCESS_START`]: crate::record::KIND_PROCESS_START

use core::ffi::CStr;

use serde::{Deserialize, Serialize};

use crate::record::{Event, KIND_PROCESS_RANK};

/// A process's place in its job, from its environment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RankInfo {
    /// The global rank.
    pub rank: u32,
    /// The rank among the job's processes on this node.
    pub local_rank: Option<u32>,
    /// Processes in the job.
    pub world_size: Option<u32>,
    /// Processes of the job on this node.
    pub local_world_size: Option<u32>,
    /// The node's index in the job (torchrun's `GROUP_RANK`, Slurm's `SLURM_NODEID`).
    pub node_rank: Option<u32>,
    /// The variable the rank came from (`RANK`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK`,
    /// `SLURM_PROCID`).
    pub source: String,
}

/// The variables of one launcher, in [`RankInfo`] order.
pub struct RankSource {
    /// The variable holding the rank; also [`RankInfo::source`].
    pub rank: &'static CStr,
    /// Local rank, world size, local world size, node index (`None`: this launcher has none).
    pub local_rank: Option<&'static CStr>,
    /// See [`RankSource::local_rank`].
    pub world_size: Option<&'static CStr>,
    /// See [`RankSource::local_rank`].
    pub local_world_size: Option<&'static CStr>,
    /// See [`RankSource::local_rank`].
    pub node_rank: Option<&'static CStr>,
}

/// The launchers, in precedence order (the table in the module documentation). The record
/// carries the index + 1 of the source in `extra`, so the order is part of the ring ABI:
/// append only.
pub const RANK_SOURCES: [RankSource; 4] = [
    RankSource {
        rank: c"RANK",
        local_rank: Some(c"LOCAL_RANK"),
        world_size: Some(c"WORLD_SIZE"),
        local_world_size: Some(c"LOCAL_WORLD_SIZE"),
        node_rank: Some(c"GROUP_RANK"),
    },
    RankSource {
        rank: c"OMPI_COMM_WORLD_RANK",
        local_rank: Some(c"OMPI_COMM_WORLD_LOCAL_RANK"),
        world_size: Some(c"OMPI_COMM_WORLD_SIZE"),
        local_world_size: Some(c"OMPI_COMM_WORLD_LOCAL_SIZE"),
        node_rank: None,
    },
    RankSource {
        rank: c"PMI_RANK",
        local_rank: Some(c"MPI_LOCALRANKID"),
        world_size: Some(c"PMI_SIZE"),
        local_world_size: Some(c"MPI_LOCALNRANKS"),
        node_rank: None,
    },
    RankSource {
        rank: c"SLURM_PROCID",
        local_rank: Some(c"SLURM_LOCALID"),
        world_size: Some(c"SLURM_NTASKS"),
        local_world_size: None,
        node_rank: Some(c"SLURM_NODEID"),
    },
];

/// The node index when the launcher names none.
const NODE_FALLBACK: &CStr = c"SLURM_NODEID";

/// "Unset" in the packed fields of a [`KIND_PROCESS_RANK`] record.
const UNSET: u32 = u32::MAX;

/// The rank variables as the preload packs them into one ring record, without allocation:
/// `fd` = rank, `extra` = source index + 1, `arg` = local rank | world size << 32, `arg2` =
/// local world size | node index << 32 (`u32::MAX`: unset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RankRecord {
    /// The global rank.
    pub rank: u32,
    /// Index into [`RANK_SOURCES`].
    pub source: usize,
    /// As in [`RankInfo`].
    pub local_rank: Option<u32>,
    /// As in [`RankInfo`].
    pub world_size: Option<u32>,
    /// As in [`RankInfo`].
    pub local_world_size: Option<u32>,
    /// As in [`RankInfo`].
    pub node_rank: Option<u32>,
}

/// A decimal u32 (surrounding spaces allowed); anything else is `None`.
pub fn parse_u32(text: &[u8]) -> Option<u32> {
    let text = text.trim_ascii();
    if text.is_empty() || text.len() > 10 {
        return None;
    }
    let mut value: u64 = 0;
    for &digit in text {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value * 10 + (digit - b'0') as u64;
    }
    u32::try_from(value).ok()
}

fn pack(low: Option<u32>, high: Option<u32>) -> u64 {
    low.unwrap_or(UNSET) as u64 | (high.unwrap_or(UNSET) as u64) << 32
}

fn unpack(word: u64) -> (Option<u32>, Option<u32>) {
    let field = |v: u32| (v != UNSET).then_some(v);
    (field(word as u32), field((word >> 32) as u32))
}

impl RankRecord {
    /// The rank of a process whose environment `lookup` reads (`getenv` in the preload), or
    /// `None` when no rank variable holds a number.
    pub fn from_env<'a>(lookup: impl Fn(&CStr) -> Option<&'a [u8]>) -> Option<RankRecord> {
        let number = |name: Option<&CStr>| name.and_then(&lookup).and_then(parse_u32);
        RANK_SOURCES.iter().enumerate().find_map(|(source, vars)| {
            let rank = number(Some(vars.rank))?;
            Some(RankRecord {
                rank,
                source,
                local_rank: number(vars.local_rank),
                world_size: number(vars.world_size),
                local_world_size: number(vars.local_world_size),
                node_rank: number(vars.node_rank).or_else(|| number(Some(NODE_FALLBACK))),
            })
        })
    }

    /// The ring record (the caller fills in `pid`, `tid` and `start`).
    pub fn to_event(&self) -> Event {
        Event {
            kind: KIND_PROCESS_RANK,
            fd: self.rank as i32,
            extra: self.source as u32 + 1,
            arg: pack(self.local_rank, self.world_size),
            arg2: pack(self.local_world_size, self.node_rank),
            ..Event::default()
        }
    }

    /// The rank a [`KIND_PROCESS_RANK`] record carries; `None` for a source this build does
    /// not know.
    pub fn from_event(event: &Event) -> Option<RankRecord> {
        let source = (event.extra as usize).checked_sub(1).filter(|&s| s < RANK_SOURCES.len())?;
        let (local_rank, world_size) = unpack(event.arg);
        let (local_world_size, node_rank) = unpack(event.arg2);
        Some(RankRecord {
            rank: event.fd as u32,
            source,
            local_rank,
            world_size,
            local_world_size,
            node_rank,
        })
    }

    /// As stored in `run.bin`.
    pub fn info(&self) -> RankInfo {
        RankInfo {
            rank: self.rank,
            local_rank: self.local_rank,
            world_size: self.world_size,
            local_world_size: self.local_world_size,
            node_rank: self.node_rank,
            source: RANK_SOURCES
                .get(self.source)
                .map(|s| s.rank.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&'static str, &'static str)]) -> Option<RankRecord> {
        RankRecord::from_env(|name| {
            vars.iter().find(|(n, _)| n.as_bytes() == name.to_bytes()).map(|(_, v)| v.as_bytes())
        })
    }

    #[test]
    fn torchrun_variables() {
        let r = env(&[
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("GROUP_RANK", "1"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NODEID", "7"),
        ])
        .unwrap();
        assert_eq!(
            r.info(),
            RankInfo {
                rank: 5,
                local_rank: Some(1),
                world_size: Some(8),
                local_world_size: Some(4),
                node_rank: Some(1),
                source: "RANK".into()
            }
        );
        assert_eq!(RankRecord::from_event(&r.to_event()), Some(r));
    }

    #[test]
    fn precedence_and_fallbacks() {
        assert_eq!(env(&[]), None);
        assert_eq!(env(&[("RANK", "x"), ("LOCAL_RANK", "0")]), None);
        let mpi = env(&[("OMPI_COMM_WORLD_RANK", "3"), ("PMI_RANK", "9"), ("SLURM_NODEID", "2")]).unwrap();
        assert_eq!(
            (mpi.rank, mpi.info().source.as_str(), mpi.node_rank),
            (3, "OMPI_COMM_WORLD_RANK", Some(2))
        );
        let pmi = env(&[("PMI_RANK", "9"), ("PMI_SIZE", "16"), ("SLURM_PROCID", "0")]).unwrap();
        assert_eq!((pmi.rank, pmi.world_size, pmi.source), (9, Some(16), 2));
        let slurm = env(&[("SLURM_PROCID", "12"), ("SLURM_LOCALID", "0"), ("SLURM_NODEID", "3")]).unwrap();
        let info = slurm.info();
        assert_eq!((info.rank, info.local_rank, info.node_rank), (12, Some(0), Some(3)));
        assert_eq!(info.source, "SLURM_PROCID");
        assert_eq!(RankRecord::from_event(&slurm.to_event()), Some(slurm));
        // A source from a newer preload is not misread.
        let mut future = slurm.to_event();
        future.extra = 99;
        assert_eq!(RankRecord::from_event(&future), None);
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u32(b"0"), Some(0));
        assert_eq!(parse_u32(b" 42 "), Some(42));
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), None);
        assert_eq!(parse_u32(b"-1"), None);
        assert_eq!(parse_u32(b""), None);
        assert_eq!(parse_u32(b"99999999999999"), None);
    }
}
