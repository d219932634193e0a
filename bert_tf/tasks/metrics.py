"""Evaluation metrics in NumPy (no sklearn/scipy): GLUE metrics and entity-level P/R/F1."""
import collections

import numpy as np


def accuracy(labels, preds):
    """Share of equal labels and predictions; 0.0 for no examples.

    Args:
        labels: array-like gold labels.
        preds: array-like predictions, same shape.
    """
    labels, preds = np.asarray(labels), np.asarray(preds)
    return float(np.mean(labels == preds)) if labels.size else 0.0


def f1_score(labels, preds, positive=1):
    """Binary F1 of the `positive` class (GLUE's F1 for MRPC/QQP); 0.0 when undefined.

    Args:
        labels: array-like gold class ids.
        preds: array-like predicted class ids.
        positive: the class scored.
    """
    labels, preds = np.asarray(labels), np.asarray(preds)
    tp = float(np.sum((preds == positive) & (labels == positive)))
    fp = float(np.sum((preds == positive) & (labels != positive)))
    fn = float(np.sum((preds != positive) & (labels == positive)))
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def matthews_corrcoef(labels, preds):
    """Matthews correlation (multi-class form; equals the binary formula for 2 classes).

    0.0 when undefined (a constant prediction or label), as sklearn returns.

    Args:
        labels: array-like gold class ids.
        preds: array-like predicted class ids.
    """
    labels, preds = np.asarray(labels), np.asarray(preds)
    classes = np.union1d(labels, preds)
    index = {c: i for i, c in enumerate(classes.tolist())}
    cm = np.zeros((len(classes), len(classes)), dtype=np.float64)
    for t, p in zip(labels.tolist(), preds.tolist()):
        cm[index[t], index[p]] += 1
    t_sum, p_sum = cm.sum(axis=1), cm.sum(axis=0)
    n, correct = cm.sum(), np.trace(cm)
    cov_tp = correct * n - np.dot(t_sum, p_sum)
    cov_pp = n * n - np.dot(p_sum, p_sum)
    cov_tt = n * n - np.dot(t_sum, t_sum)
    denom = np.sqrt(cov_pp * cov_tt)
    return 0.0 if denom == 0 else float(cov_tp / denom)


def pearson(x, y):
    """Pearson correlation (STS-B); 0.0 when either side is constant.

    Args:
        x: array-like predictions.
        y: array-like targets.
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    xc, yc = x - x.mean(), y - y.mean()
    denom = np.sqrt(np.sum(xc * xc) * np.sum(yc * yc))
    return 0.0 if denom == 0 else float(np.sum(xc * yc) / denom)


def rankdata(x):
    """Ranks starting at 1, ties get their average rank (scipy's default 'average')."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), np.float64)
    sorted_x = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(x, y):
    """Spearman rank correlation: Pearson of the average ranks, as scipy computes it.

    Args:
        x: array-like predictions.
        y: array-like targets.
    """
    return pearson(rankdata(x), rankdata(y))


# --- entity-level scores (conlleval / seqeval default mode) -------------------------------

def _split_tag(tag):
    if tag in ("O", "", None):
        return "O", ""
    if "-" in tag:
        prefix, kind = tag.split("-", 1)
        if prefix in ("B", "I", "E", "S"):
            return prefix, kind
    return "I", tag  # a bare type counts as inside, as conlleval does


def _chunk_ends(prev_prefix, prev_type, prefix, kind):
    if prev_prefix in ("E", "S"):
        return True
    if prev_prefix in ("B", "I"):
        return prefix in ("B", "S", "O") or kind != prev_type
    return False


def _chunk_starts(prev_prefix, prev_type, prefix, kind):
    if prefix in ("B", "S"):
        return True
    if prefix in ("I", "E"):
        return prev_prefix in ("E", "S", "O") or kind != prev_type
    return False


def get_entities(tags):
    """Entities (type, start, end inclusive) of one tag sequence, IOB1/IOB2/IOBES alike."""
    entities, start = [], None
    prev_prefix, prev_type = "O", ""
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, kind = _split_tag(tag)
        if start is not None and _chunk_ends(prev_prefix, prev_type, prefix, kind):
            entities.append((prev_type, start, i - 1))
            start = None
        if _chunk_starts(prev_prefix, prev_type, prefix, kind):
            start = i
        prev_prefix, prev_type = prefix, kind
    return entities


def entity_scores(true_seqs, pred_seqs):
    """Micro precision/recall/F1 over exact entity matches, plus per-type scores.

    An entity counts only if type, start and end all match (a partial overlap is both a false
    positive and a false negative), as conlleval/seqeval score it.

    Args:
        true_seqs: gold tag sequences (lists of str).
        pred_seqs: predicted tag sequences, each as long as its gold one.

    Returns:
        Dict of precision, recall, f1 and per_type {type: precision/recall/f1/support}.
    """
    if len(true_seqs) != len(pred_seqs):
        raise ValueError(f"{len(true_seqs)} gold sequences vs {len(pred_seqs)} predicted")
    true_set, pred_set = set(), set()
    for n, (t, p) in enumerate(zip(true_seqs, pred_seqs)):
        if len(t) != len(p):
            raise ValueError(f"sequence {n}: {len(t)} gold tags vs {len(p)} predicted")
        true_set.update((n,) + e for e in get_entities(t))
        pred_set.update((n,) + e for e in get_entities(p))

    def prf(tp, n_pred, n_true):
        p = tp / n_pred if n_pred else 0.0
        r = tp / n_true if n_true else 0.0
        return p, r, (2 * p * r / (p + r) if p + r else 0.0)

    counts = collections.defaultdict(lambda: [0, 0, 0])  # tp, pred, true
    for e in pred_set:
        counts[e[1]][1] += 1
        counts[e[1]][0] += e in true_set
    for e in true_set:
        counts[e[1]][2] += 1
    tp = sum(c[0] for c in counts.values())
    p, r, f = prf(tp, len(pred_set), len(true_set))
    per_type = {k: dict(zip(("precision", "recall", "f1"), prf(*c)), support=c[2])
                for k, c in sorted(counts.items())}
    return {"precision": p, "recall": r, "f1": f, "per_type": per_type}
