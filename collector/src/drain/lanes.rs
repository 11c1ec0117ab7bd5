//! The lanes in use: which lanes a pass reads, known from the last look at every lane's state
//! and kept up to date from the lanes already known, looking at all of them again only when a
//! producer counted a claim, or now and then.

use std::sync::atomic::Ordering;

use mlprof_format::ring::{LANE_ACTIVE, LANE_CLAIMING, LANE_RETIRED, RingView, lane_state};

/// Every this many passes, a pass looks at every lane's state although no claim was counted
/// since (see [`LanesInUse::look`]): a claim abandoned half-way, a lane a producer failed to
/// back and gave back, a state scribbled over are found within about a second.
const LOOK_AT_ALL_EVERY: u32 = 10;

/// The lanes `CLAIMING`, `ACTIVE` or `RETIRED` when the pass last looked, and what decides
/// when it looks at every lane again.
#[derive(Default)]
pub(super) struct LanesInUse {
    /// Their indexes, in the ring's order.
    pub(super) indexes: Vec<u32>,
    /// The header's claim count when the pass last looked at every lane.
    claims_seen: Option<u32>,
    /// Passes made.
    passes: u32,
}

/// Whether a lane in state word `word` belongs to a thread (or did, and holds its last records).
fn in_use(word: u32) -> bool {
    matches!(lane_state(word), LANE_CLAIMING | LANE_ACTIVE | LANE_RETIRED)
}

impl LanesInUse {
    /// Brings the lanes in use up to date (one pass's look; `lane_count` lanes in `view`): from
    /// every lane's state when a producer claimed a lane since the last such look (the header's
    /// `lanes_claimed` moved; a producer bumps it after its lane is `ACTIVE`, so a count read
    /// before the look covers every claim it counts) and every [`LOOK_AT_ALL_EVERY`]th pass,
    /// else from the lanes already known. A lane claimed while the count was read is seen a
    /// pass later. The 256 state words lie on 48 pages that a pass after a 100 ms sleep read
    /// cold: up to ~80 µs a pass on these VMs. True when it looked at every lane (the
    /// spare-lane bookkeeping looks then too).
    pub(super) fn look(&mut self, view: &RingView, lane_count: u32) -> bool {
        let claimed = view.header().lanes_claimed.load(Ordering::Acquire);
        self.passes = self.passes.wrapping_add(1);
        if self.claims_seen == Some(claimed) && !self.passes.is_multiple_of(LOOK_AT_ALL_EVERY) {
            self.indexes.retain(|&index| {
                view.lane(index).is_some_and(|lane| in_use(lane.state.load(Ordering::Acquire)))
            });
            return false;
        }
        self.claims_seen = Some(claimed);
        self.indexes.clear();
        for index in 0..lane_count {
            if view.lane(index).is_some_and(|lane| in_use(lane.state.load(Ordering::Acquire))) {
                self.indexes.push(index);
            }
        }
        true
    }
}
