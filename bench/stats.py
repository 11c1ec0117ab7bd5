"""Paired statistics for the benchmarks in bench/ (python3 standard library only).

On a noisy 2-vCPU VM a single bare run can be 10-20 % off, so a variant is never compared with
"the" bare time. Every variant runs next to a bare run in the same round (interleaved, order
rotated), and what is reported is the median of the per-round (per-pair) ratios or differences,
with a percentile-bootstrap 95 % confidence interval over the pairs: resample the pairs with
replacement, take the median of each resample, report the 2.5th and 97.5th percentiles.
The seed is fixed so that a report is reproducible from its raw data.
"""

import random
import statistics

BOOTSTRAP_RESAMPLES = 10000
SEED = 20261126


def median_ci(values, resamples=BOOTSTRAP_RESAMPLES, level=0.95, seed=SEED):
    """Median of `values` and its percentile-bootstrap confidence interval.

    Returns (median, low, high); low and high are None with fewer than 3 values (a bootstrap of
    one or two points says nothing)."""
    xs = [v for v in values if v is not None]
    if not xs:
        return None, None, None
    med = statistics.median(xs)
    if len(xs) < 3:
        return med, None, None
    rng = random.Random(seed)
    n = len(xs)
    meds = sorted(statistics.median(rng.choices(xs, k=n)) for _ in range(resamples))
    tail = (1.0 - level) / 2.0
    lo = meds[int(tail * (resamples - 1))]
    hi = meds[int((1.0 - tail) * (resamples - 1))]
    return med, lo, hi


def paired(samples_v, samples_b, key, op="ratio"):
    """Per-pair ratios (v/b) or differences (v-b) of `key`, over the rounds both have.

    samples_* map round number -> sample dict; a round where either failed is left out."""
    out = []
    for rnd, s in samples_v.items():
        b = samples_b.get(rnd)
        if b is None or s.get(key) is None or b.get(key) is None:
            continue
        if op == "ratio":
            if b[key] > 0:
                out.append(s[key] / b[key])
        else:
            out.append(s[key] - b[key])
    return out


def fmt_ratio_ci(med, lo, hi):
    """'×1.012 [0.998, 1.027]' as a percent change: '+1.2 % [−0.2, +2.7]'."""
    return fmt_points_ci(*(None if x is None else (x - 1) * 100 for x in (med, lo, hi)), digits=1)


def fmt_points_ci(med, lo, hi, digits=2):
    """A difference in percent (of a core, of a run) with its interval: '+0.22 % [+0.17, +0.34]'."""
    if med is None:
        return "–"
    s = f"{med:+.{digits}f} %"
    if lo is not None:
        s += f" [{lo:+.{digits}f}, {hi:+.{digits}f}]"
    return s


def verdict(lo, hi, target):
    """How a ratio's CI sits against a slowdown target such as 1.01."""
    if lo is None:
        return "too few pairs"
    if hi <= target:
        return f"within {((target - 1) * 100):.0f} %"
    if lo > target:
        return f"above {((target - 1) * 100):.0f} %"
    return f"straddles {((target - 1) * 100):.0f} %"
