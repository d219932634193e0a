"""Time-to-quality summary of bench/time_to_quality.py: per-replicate rows, each arm's ratio of
means with a percentile-bootstrap and Fieller 95% interval, whether it clears the goal."""
import json
import os

import numpy as np

from curves import first_time, mean_curve

ARMS = ("mg", "plain", "packed", "packed_xla", "packed_bf16", "two_phase")
# The goal's arms (bert-mini, seq 128, packed, float32): as shipped, and with --jit_compile.
GOAL_ROWS = {"packed": "the goal's row", "packed_xla": "the goal's row with --jit_compile"}
GOAL, GOAL_LOW = 2.0, 1.5
PARITY_TOLERANCE = 1e-4  # bert_tf's eval of Model Garden's weights vs Model Garden's own
MIN_REPLICATES = 5  # below this no interval is stated (a bootstrap of 2 is their min and max)
# Student's t, 97.5% quantile, by degrees of freedom (scipy is not in the tested set).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def equal_batches(batch, per_row, tolerance=0.005):
    """(packed rows a step, sequences a plain step) with the same sequences a step on average:
    a whole number of rows of the packed file's mean `per_row` sequences rarely makes a whole
    number of sequences (rounding to half a sequence cost packed 1.2-2.9% of its sequences at
    bert-tiny). Among pairs within a quarter of `batch`: the one nearest `batch` whose mismatch
    is <= `tolerance`, else the smallest mismatch; below that range, rows for `batch`."""
    pairs = [(r, round(r * per_row)) for r in range(1, 2 * batch + 2)]
    pairs = [(r, b) for r, b in pairs if b >= 1 and abs(b - batch) <= batch / 4]

    def mismatch(pair):
        return abs(pair[0] * per_row - pair[1]) / pair[1]
    close = [p for p in pairs if mismatch(p) <= tolerance]
    if close:
        return min(close, key=lambda p: (abs(p[1] - batch), mismatch(p)))
    if pairs:
        return min(pairs, key=lambda p: (mismatch(p), abs(p[1] - batch)))
    rows = max(1, round(batch / per_row))
    return rows, max(1, round(rows * per_row))


def t975(df):
    """Student's t 97.5% quantile; above df 30 the value at the next lower tabled df (30, 40,
    60, 120: a slightly wider interval, never a narrower one)."""
    if df <= len(_T975):
        return _T975[df - 1]
    return 2.042 if df < 40 else 2.021 if df < 60 else 2.000 if df < 120 else 1.980


def ratio_interval(t_mg, t_arm, resamples=10_000):
    """(ratio of means, bootstrap 95% interval, Fieller 95% interval or None if unbounded)."""
    x, y = np.asarray(t_mg, float), np.asarray(t_arm, float)
    n = len(x)
    idx = np.random.default_rng(0).integers(0, n, (resamples, n))
    boot = x[idx].mean(1) / y[idx].mean(1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    fieller = None
    if n > 2:  # {r: (mean x - r mean y)^2 <= t^2 var(mean x - r mean y)}, paired
        t2, c = t975(n - 1) ** 2 / n, np.cov(x, y)
        a, b = y.mean() ** 2 - t2 * c[1, 1], x.mean() * y.mean() - t2 * c[0, 1]
        d = b * b - a * (x.mean() ** 2 - t2 * c[0, 0])
        fieller = ((b - d ** 0.5) / a, (b + d ** 0.5) / a) if a > 0 and d >= 0 else None
    return x.mean() / y.mean(), (float(lo), float(hi)), fieller


def _parity_equal(pair):
    """bert_tf's and Model Garden's eval of the same weights agree."""
    ours, theirs = pair
    return abs(ours - theirs) <= PARITY_TOLERANCE


# Targets, per replicate: Model Garden's final accuracy (the definition: the goal is
# judged on it), and 90% of Model Garden's gain over the unigram baseline (below the plateau,
# where a few thousandths of final-accuracy noise decide whether a curve "gets there").
TARGETS = {"final": lambda final, baseline: final,
           "gain90": lambda final, baseline: baseline + 0.9 * (final - baseline)}


def summarize(name, results):
    """Per-replicate rows, each arm's ratio of means and interval; the model's JSON summary.
    results: [(seed, curves, facts)]; an arm counts in the replicates it ran in. The goal is
    judged at the "final" target; "gain90" is stated beside it (summary["gain90"])."""
    arms = [a for a in ARMS if any(a in c for _, c, _ in results)]
    print(f"\n### bert-{name}\n\n| replicate | baseline | MG final (target) | "
          + " | ".join(f"{a} final / s to target" for a in arms) + " |\n|"
          + "---|" * (3 + len(arms)))
    invalid_seeds = []
    for seed, curves, facts in results:
        target = curves["mg"][-1][2]
        cells = []
        for a in arms:
            if a not in curves:
                cells.append("-")
                continue
            t = first_time(curves[a], target)
            cells.append(f"{curves[a][-1][2]:.3f} / "
                         + (f">{curves[a][-1][1]:.1f}" if t is None else f"{t:.1f}"))
        invalid = target < max(2 * facts["baseline"], facts["baseline"] + 0.05)
        invalid_seeds += [seed] * invalid
        print(f"| {seed} | {facts['baseline']:.3f} | {target:.3f}"
              + (" INVALID" if invalid else "") + " | " + " | ".join(cells) + " |")
    parity = [f["parity"] for _, _, f in results if "parity" in f]
    # Not checked (--no_parity) or not equal: the accuracies are not comparable, never cleared.
    parity_ok = bool(parity) and all(map(_parity_equal, parity))
    summary = {"invalid": invalid_seeds, "parity_ok": parity_ok}
    for kind, target_of in TARGETS.items():
        stats = _ratios(name, results, arms, target_of, kind, invalid_seeds, parity_ok)
        if kind == "final":
            summary.update(stats)
        else:
            summary[kind] = stats
    for seed, curves, facts in results:
        if "phase_seconds" in facts:
            print(f"two_phase replicate {seed}: phase 1 (128) {facts['phase_seconds'][0]:.1f} s, "
                  f"phase 2 (512) {facts['phase_seconds'][1]:.1f} s; accuracy at 128 "
                  f"{facts['acc128_phase1']:.3f} after phase 1, {curves['two_phase'][-1][2]:.3f}"
                  f" after phase 2; at 512 {facts['acc512']:.3f}")
        if "parity" in facts:
            ours, theirs = facts["parity"]
            print("eval parity (replicate %d): Model Garden's final weights, bert_tf's eval "
                  "%.4f vs Model Garden's %.4f: %s" % (seed, ours, theirs, "equal"
                                                       if _parity_equal(facts["parity"]) else
                  f"PARITY FAILED (> {PARITY_TOLERANCE}): the accuracies are not comparable"))
    common = [a for a in arms if all(a in c for _, c, _ in results)]
    means = {a: mean_curve([c[a] for _, c, _ in results]) for a in common}
    target, t_mg = means["mg"][-1][2], first_time(means["mg"], means["mg"][-1][2])
    print(f"mean curves of {len(results)} replicates (order noise averaged, as bench/packing.py "
          f"judges): MG final {target:.3f} at {t_mg:.1f} s; " + ", ".join(
              f"{a} " + ("never" if t is None else f"{t:.1f} s, {t_mg / t:.2f}x")
              for a, t in ((a, first_time(means[a], target)) for a in common[1:])))
    summary["mean_curves"] = means
    return summary


def _ratios(name, results, arms, target_of, kind, invalid_seeds, parity_ok):
    """Each arm's per-replicate and mean ratios of Model Garden's time to `kind`'s target over
    the arm's; printed, and returned as {arm: {...}, "mg_times": ...}."""
    times = {a: {} for a in arms}  # arm -> {seed: (first crossing or None, total seconds)}
    for seed, curves, facts in results:
        target = target_of(curves["mg"][-1][2], facts["baseline"])
        for a in curves:
            times[a][seed] = (first_time(curves[a], target), curves[a][-1][1])
    label = ("Model Garden's final accuracy" if kind == "final" else
             "90% of Model Garden's gain over the unigram baseline")
    print(f"to {label}:")
    out = {"mg_times": times["mg"]}
    # A target above Model Garden's own curve (a final below the baseline: INVALID anyway)
    # has no Model Garden time: such replicates are left out of this target's ratios.
    no_mg = sorted(s for s, (t, _) in times["mg"].items() if t is None)
    if no_mg:
        print(f"  Model Garden never reaches this target in replicate(s) {no_mg}: left out")
    out["mg_never"] = no_mg
    for a in arms[1:]:
        seeds = sorted(s for s in times[a] if s not in no_mg)
        if not seeds:
            continue
        t_mg = [times["mg"][s][0] for s in seeds]
        t_arm = [t if t is not None else total for t, total in (times[a][s] for s in seeds)]
        censored = [s for s in seeds if times[a][s][0] is None]
        per = ", ".join(("<" if s in censored else "") + f"{m / v:.2f}"  # censored: upper bound
                        for s, m, v in zip(seeds, t_mg, t_arm))
        eligible = (len(seeds) >= MIN_REPLICATES and not censored and parity_ok and not no_mg
                    and not set(seeds) & set(invalid_seeds))
        stats = _verdict(t_mg, t_arm, eligible)
        text = stats.pop("text")
        totals = [np.mean([times[k][s][1] for s in seeds]) for k in (a, "mg")]
        goal_row = name == "mini" and a in GOAL_ROWS and kind == "final"
        first = _with_first_calls(results, a, seeds, t_mg, t_arm, eligible)
        first_text = first.pop("text") if first else None
        bound = "<= " if censored else ""  # censored replicates counted at their total
        print(f"  {a} ({len(seeds)} replicates): all steps {totals[0]:.1f} s (MG {totals[1]:.1f} s,"
              f" {totals[1] / totals[0]:.2f}x); to target: per replicate MG/ours {per}; ratio of "
              f"means {bound}{text}" + (f" ({GOAL_ROWS[a]})" if goal_row else "")
              + (f"; censored: replicate(s) {censored} (counted at their total: the ratio is "
                 "an upper bound)" if censored else "")
              + (f"; with each side's first call (tracing, XLA compiling) added to its time: "
                 f"ratio of means {bound}{first_text} (first call: MG {first['mg']:.1f} s, "
                 f"{a} {first[a]:.1f} s on average)" if first else ""))
        out[a] = {"seeds": seeds, "per_replicate_ratio": [m / v for m, v in zip(t_mg, t_arm)],
                  "times": times[a], "censored": censored, **stats, "with_first_calls": first}
    return out


def _verdict(t_mg, t_arm, eligible):
    """Ratio of means, its intervals and whether it clears the goal (`eligible`: enough
    replicates, none censored or INVALID, eval parity equal); "text" prints them."""
    ratio, boot, fieller = ratio_interval(t_mg, t_arm)
    # A percentile bootstrap over few replicates is too narrow: Fieller's bound decides too.
    clears = bool(eligible and ratio >= GOAL and boot[0] > GOAL_LOW and fieller is not None
                  and fieller[0] > GOAL_LOW)
    fl = "unbounded" if fieller is None else f"[{fieller[0]:.2f}, {fieller[1]:.2f}]"
    interval = (f"95% bootstrap [{boot[0]:.2f}, {boot[1]:.2f}], Fieller {fl}"
                if len(t_mg) >= MIN_REPLICATES else
                f"no interval (n = {len(t_mg)} < {MIN_REPLICATES})")
    return {"ratio_of_means": ratio, "bootstrap95": boot, "fieller95": fieller,
            "cleared": clears, "text": f"{ratio:.2f}x, {interval}; >= {GOAL}x with interval > "
                                      f"{GOAL_LOW}x: " + ("cleared" if clears else "NOT cleared")}


def _with_first_calls(results, arm, seeds, t_mg, t_arm, eligible):
    """The verdict with each side's first call (traced or XLA-compiled, trained but not on the
    clock) added to its time in each replicate, and the mean first-call seconds; None where a
    replicate did not record them."""
    first = {s: f.get("first_call_seconds", {}) for s, _, f in results}
    if not all("mg" in first[s] and arm in first[s] for s in seeds):
        return None
    mg = [t + first[s]["mg"] for s, t in zip(seeds, t_mg)]
    ours = [t + first[s][arm] for s, t in zip(seeds, t_arm)]
    return {**_verdict(mg, ours, eligible),
            "mg": float(np.mean([first[s]["mg"] for s in seeds])),
            arm: float(np.mean([first[s][arm] for s in seeds]))}


def write_json(out, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(f"{path}.tmp-{os.getpid()}", "w") as f:
        json.dump(out, f, indent=1, default=float)
    os.replace(f"{path}.tmp-{os.getpid()}", path)
