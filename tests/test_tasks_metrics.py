"""Metrics against hand-computed values: GLUE metrics, official SQuAD EM/F1, entity P/R/F1."""
import math

import pytest

from bert_tf.tasks import metrics, squad_metrics


# --- GLUE metrics ---------------------------------------------------------------------------

COLA_LABELS = [1, 1, 1, 0, 0, 1, 0, 1]
COLA_PREDS = [1, 0, 1, 0, 1, 1, 0, 1]  # TP 4, FN 1, TN 2, FP 1


def test_accuracy_f1_mcc_hand_computed():
    assert metrics.accuracy(COLA_LABELS, COLA_PREDS) == 0.75
    assert metrics.f1_score(COLA_LABELS, COLA_PREDS) == pytest.approx(0.8)  # 2*4/(8+1+1)
    # (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (8 - 1) / sqrt(5*5*3*3) = 7/15
    assert metrics.matthews_corrcoef(COLA_LABELS, COLA_PREDS) == pytest.approx(7 / 15)


def test_mcc_edge_cases():
    assert metrics.matthews_corrcoef([0, 1, 0, 1], [0, 1, 0, 1]) == pytest.approx(1.0)
    assert metrics.matthews_corrcoef([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)
    assert metrics.matthews_corrcoef([0, 1, 0, 1], [1, 1, 1, 1]) == 0.0  # undefined -> 0
    # 3 classes, confusion [[2,0,0],[1,1,0],[0,1,1]]: sklearn's multi-class MCC = 0.55
    labels = [0, 0, 1, 1, 2, 2]
    preds = [0, 0, 0, 1, 1, 2]
    # c=4, s=6, p=[3,2,1], t=[2,2,2]: (4*6 - 12) / sqrt((36-14)*(36-12)) = 12/sqrt(528)
    assert metrics.matthews_corrcoef(labels, preds) == pytest.approx(12 / math.sqrt(528))


def test_f1_no_positive_predictions_is_zero():
    assert metrics.f1_score([1, 0, 1], [0, 0, 0]) == 0.0


def test_pearson_spearman_hand_computed():
    # xc = [-1.5,-.5,.5,1.5], yc = [-3,-1,0,4]: 11 / sqrt(5 * 26)
    assert metrics.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130))
    # ties get average ranks: x ranks [1, 2.5, 2.5, 4], y ranks [1, 3, 2, 4] -> 4.5/sqrt(22.5)
    assert metrics.rankdata([1, 2, 2, 3]).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert metrics.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert metrics.spearman([1, 2, 3], [10, 20, 1000]) == pytest.approx(1.0)


# --- entity-level scores --------------------------------------------------------------------

def test_entities_iob1_iob2_iobes():
    assert metrics.get_entities(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 1),
                                                                     ("LOC", 3, 3)]
    # IOB1: I- opens an entity; B- only separates two adjacent entities of one type
    assert metrics.get_entities(["I-PER", "I-PER", "B-PER", "O", "I-LOC"]) == [
        ("PER", 0, 1), ("PER", 2, 2), ("LOC", 4, 4)]
    # a type change inside a run starts a new entity (conlleval)
    assert metrics.get_entities(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 2)]
    assert metrics.get_entities(["S-PER", "B-ORG", "E-ORG", "O"]) == [("PER", 0, 0),
                                                                     ("ORG", 1, 2)]


def test_entity_f1_partial_match_counts_as_wrong():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "I-ORG"]]
    pred = [["B-PER", "O", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "I-ORG"]]
    s = metrics.entity_scores(gold, pred)
    # gold {PER 0-1, LOC 3, ORG 1-3}, pred {PER 0-0, LOC 3, ORG 1-3}: 2 of 3 either way
    assert s["precision"] == pytest.approx(2 / 3)
    assert s["recall"] == pytest.approx(2 / 3)
    assert s["f1"] == pytest.approx(2 / 3)
    assert s["per_type"]["PER"]["f1"] == 0.0
    assert s["per_type"]["ORG"]["f1"] == 1.0
    assert s["per_type"]["LOC"]["support"] == 1


def test_entity_scores_unequal_counts():
    gold = [["B-PER", "O", "B-LOC", "I-LOC"]]
    pred = [["B-PER", "B-ORG", "B-LOC", "O"]]
    s = metrics.entity_scores(gold, pred)
    # pred {PER, ORG, LOC 2-2} (1 right of 3); gold {PER, LOC 2-3} (1 found of 2)
    assert s["precision"] == pytest.approx(1 / 3)
    assert s["recall"] == pytest.approx(1 / 2)
    assert s["f1"] == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))


# --- SQuAD (official script rules) ----------------------------------------------------------

def test_normalize_answer():
    assert squad_metrics.normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert squad_metrics.normalize_answer("an apple a day") == "apple day"
    assert squad_metrics.normalize_answer("Theater") == "theater"  # whole words only
    assert squad_metrics.normalize_answer("(1895-1943).") == "18951943"


def test_exact_and_f1_examples():
    assert squad_metrics.exact_match_score("the Eiffel Tower", "Eiffel Tower.") == 1
    assert squad_metrics.exact_match_score("Eiffel", "Eiffel Tower") == 0
    # pred [cat, sat, on, mat] vs gold [cat, sat]: P 1/2, R 1 -> 2/3
    assert squad_metrics.f1_score("a cat sat on the mat", "the cat sat") == pytest.approx(2 / 3)
    assert squad_metrics.f1_score("Denver Broncos", "broncos!") == pytest.approx(2 / 3)
    assert squad_metrics.f1_score("", "") == 1.0   # v2.0: both empty
    assert squad_metrics.f1_score("the", "") == 1.0  # normalises to empty too
    assert squad_metrics.f1_score("London", "") == 0.0


def _dataset(qas):
    return {"data": [{"paragraphs": [{"context": "c", "qas": qas}]}]}


def test_evaluate_v1_max_over_gold_answers():
    data = _dataset([
        {"id": "a", "answers": [{"text": "Denver Broncos"}, {"text": "The Broncos"}]},
        {"id": "b", "answers": [{"text": "Santa Clara, California"}]},
        {"id": "c", "answers": [{"text": "gold"}]},
    ])
    preds = {"a": "broncos", "b": "Santa Clara"}  # c unanswered -> 0
    r = squad_metrics.evaluate_v1(data, preds)
    # a: EM 1 ("the broncos" -> "broncos"); b: F1 2*(1*2/3)/(1+2/3) = 0.8
    assert r["exact_match"] == pytest.approx(100 / 3)
    assert r["f1"] == pytest.approx(100 * (1 + 0.8 + 0) / 3)


V2_DATA = _dataset([
    {"id": "q1", "answers": [{"text": "Paris"}]},
    {"id": "q2", "answers": [], "is_impossible": True},
    {"id": "q3", "answers": [{"text": "blue whale"}]},
    {"id": "q4", "answers": [], "is_impossible": True},
])
V2_PREDS = {"q1": "Paris", "q2": "", "q3": "whale", "q4": "London"}
V2_NA = {"q1": 0.1, "q2": 0.9, "q3": 0.6, "q4": 0.3}


def test_evaluate_v2_has_ans_no_ans():
    r = squad_metrics.evaluate_v2(V2_DATA, V2_PREDS)
    assert r["exact"] == pytest.approx(50.0)
    assert r["f1"] == pytest.approx(100 * (1 + 1 + 2 / 3 + 0) / 4)
    assert r["total"] == 4
    assert r["HasAns_exact"] == pytest.approx(50.0)
    assert r["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert r["HasAns_total"] == 2
    assert r["NoAns_exact"] == pytest.approx(50.0)
    assert r["NoAns_total"] == 2
    assert "best_exact" not in r


def test_evaluate_v2_na_threshold_and_best_threshold():
    r = squad_metrics.evaluate_v2(V2_DATA, V2_PREDS, V2_NA, na_prob_thresh=0.5)
    # q2 (0.9) and q3 (0.6) are predicted unanswerable: q2 right, q3 wrong
    assert r["exact"] == pytest.approx(50.0)
    assert r["f1"] == pytest.approx(50.0)
    # sweep: start 2 (no-answer count); q1 +1 -> 3 (best, thresh 0.1); q4 -1; q3 +0; q2 +0
    assert r["best_exact"] == pytest.approx(75.0)
    assert r["best_exact_thresh"] == pytest.approx(0.1)
    assert r["best_f1"] == pytest.approx(75.0)
    assert r["best_f1_thresh"] == pytest.approx(0.1)
