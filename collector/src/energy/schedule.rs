//! The spacing scheduler: reads that cost more than their budget of a core are spaced by what
//! they cost (the energy counters, the slow metrics), and the tick that takes a read due.

/// Share of one core that a GPU's energy-counter reads may use (issue 5: the sampler must stay
/// well under 1 % of a core).
pub(super) const COUNTER_BUDGET: f64 = 0.0025;
/// Share of one core that the slow metrics of all GPUs may use together.
pub(super) const SLOW_BUDGET: f64 = 0.001;
/// Energy-counter reads (and slow metrics) are never further apart than this, whatever they
/// cost.
pub(super) const MAX_GAP_NS: u64 = 2_000_000_000;

/// Reads spaced by what they cost: each is due `cost / budget` after the one before (the cost
/// smoothed over ~8 reads, so one slow read — p90 is twice the median on an H200 — does not
/// halve the rate and a lasting change moves it within a few), never sooner than `min_gap`
/// nor later than [`MAX_GAP_NS`]. The energy counters and the slow metrics each have one.
pub(super) struct Spacing {
    /// Share of one core the reads may use.
    budget: f64,
    min_gap: u64,
    /// CPU time of one read, smoothed (ns), once measured.
    cost_ns: Option<f64>,
}

impl Spacing {
    pub(super) fn new(budget: f64, min_gap: u64) -> Spacing {
        Spacing { budget, min_gap, cost_ns: None }
    }

    /// Notes what a read cost (CPU ns).
    pub(super) fn record(&mut self, cost_ns: u64) {
        let cost = cost_ns as f64;
        self.cost_ns = Some(self.cost_ns.map_or(cost, |c| c + (cost - c) / 8.0));
    }

    /// The time between reads, ns.
    pub(super) fn gap(&self) -> u64 {
        self.cost_ns.map_or(self.min_gap, |c| (c / self.budget) as u64).clamp(self.min_gap, MAX_GAP_NS)
    }

    /// The gap and one read's CPU (ns), where the cost made the gap wider than the minimum.
    pub(super) fn widened(&self) -> Option<(u64, f64)> {
        let cost = self.cost_ns?;
        (self.gap() > self.min_gap).then_some((self.gap(), cost))
    }
}

/// When something read `gap` after `started` is due: half a tick early, so that with ticks
/// every `tick` it falls on the tick at or after `started + gap`, not the one after that.
pub(super) fn due(started: u64, gap: u64, tick: u64) -> u64 {
    started + gap.saturating_sub(tick / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_spaced_by_their_cost() {
        // 0.25 % of a core, tick 10 ms: cheap reads keep the tick, a 3.5 ms read (an H200's
        // energy counter) is taken every 1.4 s, and nothing is ever more than 2 s apart.
        let mut reads = Spacing::new(0.0025, 10_000_000);
        assert_eq!((reads.gap(), reads.widened()), (10_000_000, None));
        reads.record(2_000);
        assert_eq!((reads.gap(), reads.widened()), (10_000_000, None));
        let mut costly = Spacing::new(0.0025, 10_000_000);
        costly.record(3_500_000);
        assert_eq!(costly.widened(), Some((1_400_000_000, 3_500_000.0)));
        // One read twice as slow moves the smoothed cost by an eighth of the difference.
        costly.record(7_000_000);
        assert_eq!(costly.gap(), 1_575_000_000);
        costly.record(100_000_000);
        assert_eq!(costly.gap(), MAX_GAP_NS);
        // Due half a tick early, so that the tick at the gap takes it.
        assert_eq!(due(1_000, 100_000_000, 10_000_000), 95_001_000);
    }
}
