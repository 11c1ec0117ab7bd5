//! Ranks and nodes of a run's processes: which rank each process image works for, which
//! process is that rank's own (the "main" process) and which are its children (DataLoader
//! workers and anything else that inherited the rank's environment), and which host it ran on.

use mlprof_format::rank::RankInfo;

use super::{Image, RunMeta};

impl RunMeta {
    /// The image of `pid` that was running when a child started at `time_ns`.
    fn image_before(&self, pid: u32, time_ns: u64) -> Option<&Image> {
        let images = self.images.get(&pid)?;
        let at = images.iter().rposition(|i| i.info.start_ns <= time_ns).unwrap_or(0);
        images.get(at)
    }

    /// The pid of the process that holds the rank of image `index` of `pid`: the image's own
    /// pid when it is the rank's main process, else the first ancestor (through parents with
    /// the same rank, node and launcher variable) whose parent is not of that rank. `None`
    /// when the image has no rank.
    ///
    /// A child's environment names its parent's rank (fork children and spawned interpreters
    /// alike inherit it), so the parent chain is what tells a DataLoader worker from a rank.
    pub fn rank_main(&self, pid: u32, index: usize) -> Option<u32> {
        let image = self.images.get(&pid)?.get(index)?;
        let rank = image.info.rank.as_ref()?;
        let (mut main, mut child) = (pid, &image.info);
        // Bounded: a cycle of pids (reuse after wrap-around) must not hang a report.
        for _ in 0..64 {
            if child.ppid == child.pid {
                break;
            }
            let Some(parent) = self.image_before(child.ppid, child.start_ns) else { break };
            let same = parent.info.rank.as_ref().is_some_and(|r| same_rank(r, rank))
                && parent.info.node == image.info.node;
            if !same {
                break;
            }
            main = parent.info.pid;
            child = &parent.info;
        }
        Some(main)
    }

    /// The host a process ran on: its node's in a merged run, the run's otherwise.
    pub fn host_of(&self, node: u32) -> &str {
        self.nodes.iter().find(|n| n.node == node).map_or(self.info.host.as_str(), |n| n.host.as_str())
    }

    /// Whether any process of the run has a rank.
    pub(crate) fn has_ranks(&self) -> bool {
        self.images.values().flatten().any(|i| i.info.rank.is_some())
    }
}

/// The same rank of the same job, as far as the environment tells.
fn same_rank(a: &RankInfo, b: &RankInfo) -> bool {
    a.rank == b.rank && a.source == b.source && a.world_size == b.world_size
}

#[cfg(test)]
mod tests {
    use mlprof_format::runfile::ProcessInfo;

    use super::*;

    fn image(pid: u32, ppid: u32, start_ns: u64, rank: Option<u32>, forked: bool) -> Image {
        let rank = rank.map(|rank| RankInfo {
            rank,
            world_size: Some(2),
            source: "RANK".into(),
            ..Default::default()
        });
        Image { info: ProcessInfo { pid, ppid, start_ns, forked, rank, ..Default::default() }, exit: None }
    }

    #[test]
    fn workers_belong_to_their_ranks_main_process() {
        let mut meta = RunMeta::default();
        // torchrun (no rank) → ranks 0 and 1 → each a forked DataLoader worker, and a spawned
        // interpreter under rank 1's worker.
        for i in [
            image(100, 1, 0, None, false),
            image(200, 100, 10, Some(0), false),
            image(300, 100, 11, Some(1), false),
            image(201, 200, 20, Some(0), true),
            image(301, 300, 21, Some(1), true),
            image(302, 301, 30, Some(1), false),
        ] {
            meta.images.entry(i.info.pid).or_default().push(i);
        }
        assert_eq!(meta.rank_main(100, 0), None);
        assert_eq!(meta.rank_main(200, 0), Some(200));
        assert_eq!(meta.rank_main(300, 0), Some(300));
        assert_eq!(meta.rank_main(201, 0), Some(200));
        assert_eq!(meta.rank_main(302, 0), Some(300));
        assert!(meta.has_ranks());
    }
}
