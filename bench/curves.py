"""Accuracy-against-time curves of the time-to-quality benches (bench/packing.py,
bench/time_to_quality.py): a curve is [(step, training seconds, accuracy)] at the evaluation
points. numpy only (tests import it without TensorFlow)."""
import numpy as np


def first_time(curve, target):
    """Training seconds at which the curve first reaches `target`, linear between
    evaluations (None: never)."""
    prev = None
    for _, t, acc in curve:
        if acc >= target - 1e-9:
            if prev is None or prev[1] >= acc:
                return t
            return prev[0] + (t - prev[0]) * (target - prev[1]) / (acc - prev[1])
        prev = (t, acc)
    return None


def mean_curve(curves):
    """The pointwise mean of replicate curves; they must share their evaluation steps."""
    curves = [list(c) for c in curves]
    steps = [[p[0] for p in c] for c in curves]
    if any(s != steps[0] for s in steps):
        raise ValueError(f"mean_curve: replicates evaluated at different steps: {steps}")
    return [(points[0][0], float(np.mean([p[1] for p in points])),
             float(np.mean([p[2] for p in points]))) for points in zip(*curves)]
