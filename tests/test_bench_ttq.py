"""bench/time_to_quality.py's statistics (bench/ttq_report.py, bench/curves.py): the ratio's
intervals, censoring, the parity gate, curve arithmetic. numpy only, no TensorFlow."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))
import curves  # noqa: E402
import ttq_report  # noqa: E402


def test_t_quantiles_are_students():
    assert ttq_report.t975(1) == 12.706 and ttq_report.t975(4) == 2.776
    assert ttq_report.t975(30) == 2.042 and ttq_report.t975(35) == 2.042  # never narrower
    assert ttq_report.t975(200) == 1.980


def test_fieller_bounds_are_where_the_paired_t_statistic_is_the_quantile():
    x = np.array([20.0, 22.0, 19.0, 25.0, 21.0])  # Model Garden's seconds
    y = np.array([9.0, 10.5, 8.0, 11.0, 10.0])   # an arm's
    ratio, boot, (lo, hi) = ttq_report.ratio_interval(x, y)
    assert ratio == pytest.approx(x.mean() / y.mean())

    def t_stat(r):  # x - r y per replicate, its mean over its standard error
        d = x - r * y
        return d.mean() / (d.std(ddof=1) / np.sqrt(len(d)))
    q = ttq_report.t975(len(x) - 1)
    assert t_stat(lo) == pytest.approx(q, rel=1e-9)
    assert t_stat(hi) == pytest.approx(-q, rel=1e-9)
    assert abs(t_stat(ratio)) < q and abs(t_stat(lo * 0.99)) > q and abs(t_stat(hi * 1.01)) > q
    assert lo < boot[0] <= ratio <= boot[1] < hi  # the bootstrap is the narrower one here


def test_first_time_interpolates_and_says_never():
    curve = [(50, 10.0, 0.1), (100, 20.0, 0.3)]
    assert curves.first_time(curve, 0.2) == pytest.approx(15.0)
    assert curves.first_time(curve, 0.05) == 10.0
    assert curves.first_time(curve, 0.31) is None


def test_mean_curve_refuses_replicates_evaluated_at_other_steps():
    a, b = [(50, 10.0, 0.1), (100, 20.0, 0.3)], [(50, 12.0, 0.2), (100, 22.0, 0.4)]
    assert curves.mean_curve([a, b]) == [(50, 11.0, pytest.approx(0.15)),
                                         (100, 21.0, pytest.approx(0.35))]
    with pytest.raises(ValueError, match="different steps"):
        curves.mean_curve([a, [(40, 12.0, 0.2), (100, 22.0, 0.4)]])


def _results(n, speedup, censor=(), parity=(0.2, 0.2)):
    """n replicates: Model Garden reaches its final 0.20 at ~20 s; the arm `speedup` times
    sooner (a little spread), or never (seeds in `censor`)."""
    out = []
    for seed in range(1, n + 1):
        t = 20.0 + seed % 3
        mg = [(50, t / 2, 0.12), (100, t, 0.20)]
        arm = t / speedup * (1 + 0.02 * (seed % 2))
        packed = ([(50, arm / 2, 0.15), (100, arm, 0.199)] if seed in censor
                  else [(50, arm, 0.20), (100, arm * 2, 0.25)])
        facts = {"baseline": 0.05, **({"parity": parity} if seed == 1 else {})}
        out.append((seed, {"mg": mg, "packed": packed}, facts))
    return out


@pytest.mark.parametrize("case, results, cleared", [
    ("5 replicates, 3x", _results(5, 3.0), True),
    ("one censored", _results(5, 3.0, censor={4}), False),
    ("parity off", _results(5, 3.0, parity=(0.2, 0.21)), False),
    ("4 replicates", _results(4, 3.0), False),
    ("1.8x", _results(5, 1.8), False),
])
def test_cleared_needs_replicates_no_censoring_parity_and_the_goal(case, results, cleared,
                                                                     capsys):
    summary = ttq_report.summarize("mini", results)
    assert summary["packed"]["cleared"] is cleared, case
    printed = capsys.readouterr().out
    assert (": cleared (the goal's row)" in printed) is cleared
    if case == "one censored":
        assert summary["packed"]["censored"] == [4]
        assert "upper bound" in printed
    if case == "4 replicates":
        assert "no interval (n = 4 < 5)" in printed
    if case == "parity off":
        assert "PARITY FAILED" in printed


def test_gain90_target_sits_below_the_plateau():
    """90% of Model Garden's gain over the baseline: a replicate that ends just short of Model
    Garden's final is censored at "final" but crosses "gain90", at the interpolated time."""
    results = _results(5, 3.0, censor={4})
    summary = ttq_report.summarize("mini", results)
    assert summary["packed"]["censored"] == [4]
    gain90 = summary["gain90"]["packed"]
    assert gain90["censored"] == []
    seed, curves, _ = results[3]
    t, arm = curves["mg"][-1][1], curves["packed"][-1][1]
    # target 0.05 + 0.9 * 0.15 = 0.185: MG crosses at t/2 + t/2 * 0.065/0.08, the arm at
    # arm/2 + arm/2 * 0.035/0.049.
    want = (t / 2 * (1 + 0.065 / 0.08)) / (arm / 2 * (1 + 0.035 / 0.049))
    assert gain90["per_replicate_ratio"][3] == pytest.approx(want)
    assert summary["gain90"]["mg_times"][seed][0] == pytest.approx(t / 2 * (1 + 0.065 / 0.08))


def test_gain90_without_a_model_garden_crossing_leaves_the_replicate_out():
    """A Model Garden final below the baseline puts gain90's target above its curve: that
    replicate is left out of gain90 (and nothing clears), not a crash."""
    results = _results(5, 3.0)
    results[1][2]["baseline"] = 0.3  # replicate 2: target 0.3 + 0.9 * (0.2 - 0.3) = 0.21
    summary = ttq_report.summarize("mini", results)
    assert summary["gain90"]["mg_never"] == [2]
    assert summary["gain90"]["packed"]["seeds"] == [1, 3, 4, 5]
    assert summary["gain90"]["packed"]["cleared"] is False
    assert summary["invalid"] == [2] and summary["packed"]["cleared"] is False


@pytest.mark.parametrize("batch, per_row, want", [
    (16, 1.58, (12, 19)),   # 10 rows: 15.8 for 16 (1.3% off); 12 rows: 18.96 for 19 (0.2%)
    (16, 2.0, (8, 16)),     # exact at the batch asked for
    (16, 2.6, (5, 13)),     # 13.0 exactly (6 rows: 15.6 for 16, 2.5% off)
    (2, 2.6, (1, 3)),       # below the quarter range: rows for the batch, then its sequences
])
def test_equal_batches(batch, per_row, want):
    rows, seqs = ttq_report.equal_batches(batch, per_row)
    assert (rows, seqs) == want
    assert abs(rows * per_row - seqs) / seqs <= 0.15


def _xla_results(censor=()):
    """_results with the packed arm as packed_xla and first calls that differ per replicate."""
    results = _results(5, 3.0, censor=censor)
    for seed, curves_, facts in results:
        curves_["packed_xla"] = curves_.pop("packed")
        facts["first_call_seconds"] = {"mg": 1.0 + seed, "packed_xla": 10.0 * seed}
    return results


def _first_call_ratio(summary, seeds):
    xla = summary["packed_xla"]
    t_mg = [summary["mg_times"][s][0] for s in seeds]
    t_arm = [t if t is not None else total for t, total in (xla["times"][s] for s in seeds)]
    return (sum(t_mg) + sum(1.0 + s for s in seeds)) / (sum(t_arm) + sum(10.0 * s for s in seeds))


def test_first_calls_counted_and_the_xla_arm_is_a_goal_row(capsys):
    """The packed arm with --jit_compile is the goal's row with --jit_compile; each side's first
    call (tracing, XLA compiling: trained, off the clock) is added back, replicate by replicate,
    in a second verdict with its own interval."""
    summary = ttq_report.summarize("mini", _xla_results())
    xla = summary["packed_xla"]
    printed = capsys.readouterr().out
    assert xla["cleared"] is True
    assert ": cleared (the goal's row with --jit_compile)" in printed
    first = xla["with_first_calls"]
    want = _first_call_ratio(summary, [1, 2, 3, 4, 5])
    assert first["ratio_of_means"] == pytest.approx(want)
    assert first["ratio_of_means"] < xla["ratio_of_means"]
    assert first["mg"] == pytest.approx(4.0) and first["packed_xla"] == pytest.approx(30.0)
    assert first["cleared"] is (want >= 2.0 and first["fieller95"][0] > 1.5)
    assert "added to its time: ratio of means " + f"{want:.2f}x" in printed
    results = _xla_results()
    del results[2][2]["first_call_seconds"]  # an older run without them: no second verdict
    assert ttq_report.summarize("mini", results)["packed_xla"]["with_first_calls"] is None


def test_first_call_verdict_pairs_replicates_and_clears_on_its_own():
    """Small first calls: the second verdict clears with the first, its interval is the one
    of the per-replicate sums (pairing matters there), and one censored replicate stops both."""
    results = _xla_results()
    for seed, _, facts in results:
        facts["first_call_seconds"] = {"mg": 0.1 * seed, "packed_xla": 0.3 * seed ** 2}
    summary = ttq_report.summarize("mini", results)
    xla, seeds = summary["packed_xla"], [1, 2, 3, 4, 5]
    first = xla["with_first_calls"]
    assert xla["cleared"] is True and first["cleared"] is True
    t_mg = [summary["mg_times"][s][0] + 0.1 * s for s in seeds]
    t_arm = [xla["times"][s][0] + 0.3 * s ** 2 for s in seeds]
    ratio, boot, fieller = ttq_report.ratio_interval(t_mg, t_arm)
    assert first["ratio_of_means"] == pytest.approx(ratio)
    assert first["fieller95"] == pytest.approx(fieller)
    assert first["bootstrap95"] == pytest.approx(boot)
    censored = _xla_results(censor={2})
    for seed, _, facts in censored:
        facts["first_call_seconds"] = {"mg": 0.1 * seed, "packed_xla": 0.3 * seed ** 2}
    first = ttq_report.summarize("mini", censored)["packed_xla"]["with_first_calls"]
    assert first["ratio_of_means"] >= 2.0 and first["cleared"] is False


def test_first_calls_of_censored_replicates_are_upper_bounds(capsys):
    summary = ttq_report.summarize("mini", _xla_results(censor={4}))
    first = summary["packed_xla"]["with_first_calls"]
    assert first["cleared"] is False and summary["packed_xla"]["cleared"] is False
    assert first["ratio_of_means"] == pytest.approx(_first_call_ratio(summary, [1, 2, 3, 4, 5]))
    assert "added to its time: ratio of means <= " in capsys.readouterr().out


def test_only_bert_mini_has_goal_rows(capsys):
    summary = ttq_report.summarize("tiny", _xla_results())
    assert summary["packed_xla"]["cleared"] is True
    assert "the goal's row" not in capsys.readouterr().out
