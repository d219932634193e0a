"""SQuAD EM/F1 computed as the official evaluation scripts (v1.1 and v2.0) compute them.

Normalisation: lower-case, drop ASCII punctuation, drop the articles a/an/the as whole words,
collapse whitespace. v1.1 scores each question against its best-matching gold answer; v2.0
treats a question whose gold answers all normalise to "" as unanswerable (gold = ""), reports
HasAns_/NoAns_ breakdowns, applies `na_prob_thresh` to the no-answer probabilities, and
searches the best threshold (best_exact/best_f1).
"""
import collections
import re
import string

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s):
    """The official scripts' normalisation (see the module docstring)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _tokens(s):
    return normalize_answer(s).split() if s else []


def exact_match_score(prediction, ground_truth):
    """1 if both normalise to the same text, else 0.

    Args:
        prediction: str, the predicted answer.
        ground_truth: str, one gold answer.
    """
    return int(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction, ground_truth):
    """Token-overlap F1. Like v2.0's script: if either side is empty, 1 iff both are.

    Args:
        prediction: str, the predicted answer.
        ground_truth: str, one gold answer.
    """
    pred, gold = _tokens(prediction), _tokens(ground_truth)
    if not pred or not gold:
        return float(pred == gold)
    common = collections.Counter(pred) & collections.Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def _v1_f1(prediction, ground_truth):
    # v1.1's script has no empty-string special case: two empty strings score 0.
    pred, gold = normalize_answer(prediction).split(), normalize_answer(ground_truth).split()
    common = collections.Counter(pred) & collections.Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def _questions(dataset):
    """dataset: the JSON's "data" list (or the whole JSON dict)."""
    if isinstance(dataset, dict):
        dataset = dataset["data"]
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield qa


def evaluate_v1(dataset, predictions):
    """{'exact_match', 'f1'} in percent; unanswered questions score 0 (the script's rule).

    Args:
        dataset: the SQuAD JSON dict (or its "data" list).
        predictions: {question id: answer text}.
    """
    em = f1 = total = 0
    for qa in _questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            continue
        golds = [a["text"] for a in qa["answers"]]
        pred = predictions[qa["id"]]
        em += max(exact_match_score(pred, g) for g in golds)
        f1 += max(_v1_f1(pred, g) for g in golds)
    return {"exact_match": 100.0 * em / max(total, 1), "f1": 100.0 * f1 / max(total, 1)}


def _raw_scores_v2(dataset, predictions):
    exact, f1, has_ans = {}, {}, {}
    for qa in _questions(dataset):
        qid = qa["id"]
        answers = qa.get("answers", [])
        has_ans[qid] = bool(answers)  # the script's rule: any listed answer
        golds = [a["text"] for a in answers if normalize_answer(a["text"])]
        if not golds:
            golds = [""]
        if qid not in predictions:
            continue  # missing -> scored 0 below
        pred = predictions[qid]
        exact[qid] = max(exact_match_score(pred, g) for g in golds)
        f1[qid] = max(f1_score(pred, g) for g in golds)
    return exact, f1, has_ans


def _apply_threshold(scores, na_probs, has_ans, thresh):
    out = {}
    for qid, s in scores.items():
        out[qid] = float(not has_ans[qid]) if na_probs[qid] > thresh else s
    return out


def _aggregate(exact, f1, qids):
    n = len(qids)
    if n == 0:
        return {"exact": 0.0, "f1": 0.0, "total": 0}
    return {"exact": 100.0 * sum(exact.get(q, 0) for q in qids) / n,
            "f1": 100.0 * sum(f1.get(q, 0) for q in qids) / n, "total": n}


def _best_threshold(preds, scores, na_probs, has_ans):
    """The official search: sweep thresholds over sorted na_probs."""
    num_no_ans = sum(1 for q in has_ans if not has_ans[q])
    cur = best = num_no_ans
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda q: na_probs[q]):
        if qid not in scores:
            continue
        if has_ans[qid]:
            diff = scores[qid]
        elif preds[qid]:
            diff = -1
        else:
            diff = 0
        cur += diff
        if cur > best:
            best, best_thresh = cur, na_probs[qid]
    return 100.0 * best / max(len(scores), 1), best_thresh


def evaluate_v2(dataset, predictions, na_probs=None, na_prob_thresh=1.0):
    """The v2.0 script's report: exact, f1, total, HasAns_*, NoAns_*, and best_* with na_probs.

    Args:
        dataset: the SQuAD JSON dict (or its "data" list).
        predictions: {question id: answer text}, "" for no answer.
        na_probs: optional {question id: no-answer score} (null_odds.json); enables best_*.
        na_prob_thresh: above it a question counts as predicted unanswerable.
    """
    exact, f1, has_ans = _raw_scores_v2(dataset, predictions)
    probs = na_probs if na_probs is not None else {q: 0.0 for q in has_ans}
    exact_t = _apply_threshold(exact, {q: probs.get(q, 0.0) for q in exact}, has_ans,
                               na_prob_thresh)
    f1_t = _apply_threshold(f1, {q: probs.get(q, 0.0) for q in f1}, has_ans, na_prob_thresh)
    qids = list(has_ans)
    result = _aggregate(exact_t, f1_t, qids)
    for name, keep in (("HasAns", True), ("NoAns", False)):
        sub = [q for q in qids if has_ans[q] == keep]
        if sub:
            for k, v in _aggregate(exact_t, f1_t, sub).items():
                result[f"{name}_{k}"] = v
    if na_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = _best_threshold(
            predictions, exact, na_probs, has_ans)
        result["best_f1"], result["best_f1_thresh"] = _best_threshold(
            predictions, f1, na_probs, has_ans)
    return result
