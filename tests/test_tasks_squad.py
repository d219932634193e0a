"""SQuAD: doc-span windows, max-context, training targets, n-best decoding back to the exact
original characters, v2.0 null-answer thresholding, reading errors."""
import json
import os

import numpy as np
import pytest

import bert_tf
from bert_tf import BertError
from bert_tf.tasks import squad
from bert_tf.tokenization import FullTokenizer

FILLER = [f"w{i}" for i in range(20)]
VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "le", "cafe", "-", "noir", ",",
          "opened", "in", "1895", "(", "re", "##built", ")", ".", "when", "was", "it", "?",
          "what", "name"] + FILLER)
TARGET = "Le Café-Noir,  opened\tin 1895  (rebuilt)."  # 12 words' worth of pieces +1 (##built)
CONTEXT = " ".join(FILLER) + " " + TARGET + " " + " ".join(FILLER[:10])


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("squad") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return FullTokenizer(str(path), do_lower_case=True)


def _squad_json(path, qas, context=CONTEXT):
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": qas}]}]}
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return str(path)


def test_doc_spans_and_max_context():
    # 42 pieces, 13 per window, stride 4
    spans = squad.doc_spans(42, 13, 4)
    assert spans == [(0, 13), (4, 13), (8, 13), (12, 13), (16, 13), (20, 13), (24, 13),
                     (28, 13), (32, 10)]
    # piece 20 is in windows 2..5; windows 3 (left 8, right 4) and 4 (left 4, right 8) tie at
    # 4 + 0.13: the first wins
    assert [squad._max_context(spans, i, 20) for i in range(len(spans))] == [
        False, False, False, True, False, False, False, False, False]
    for p in range(42):  # every piece is scored in exactly one window
        assert sum(squad._max_context(spans, i, p) for i in range(len(spans))) == 1


def test_training_features_span_several_windows(tmp_path, tokenizer):
    start = CONTEXT.index("Café")
    path = _squad_json(tmp_path / "train.json", [
        {"id": "q1", "question": "what name ?",
         "answers": [{"text": "Café-Noir", "answer_start": start}]}])
    examples = squad.read_squad_examples(path, is_training=True)
    ex = examples[0]
    assert ex.doc_tokens[ex.start_position] == "Café-Noir," == ex.doc_tokens[ex.end_position]
    feats = squad.convert_examples_to_features(examples, tokenizer, max_seq_length=20,
                                               doc_stride=4, max_query_length=8,
                                               is_training=True)
    # 20 + 13 + 10 = 43 context pieces, 20 - 3 (query) - 3 = 14 per window, stride 4
    assert len(feats) == len(squad.doc_spans(43, 14, 4)) == 9
    inside = [f for f in feats if f.start_position > 0]
    outside = [f for f in feats if f.start_position == 0]
    assert inside and outside
    for f in inside:  # the answer span is tightened from "cafe - noir ," to "cafe - noir"
        assert f.tokens[f.start_position:f.end_position + 1] == ["cafe", "-", "noir"]
        assert f.tokens[:5] == ["[CLS]", "what", "name", "?", "[SEP]"]
        assert f.segment_ids[:5] == [0] * 5 and f.segment_ids[5] == 1
    for f in outside:
        assert f.end_position == 0
        assert "noir" not in f.tokens or "cafe" not in f.tokens
    arrays = squad.features_to_arrays(feats, True)
    assert arrays["input_word_ids"].shape == (9, 20)
    assert arrays["start_positions"].tolist() == [f.start_position for f in feats]


def _peaked_logits(feats, start_piece, end_piece, seq):
    """Start logit 8 at every `start_piece`, end logit 8 at every `end_piece`, else 0."""
    start = np.zeros((len(feats), seq), np.float32)
    end = np.zeros((len(feats), seq), np.float32)
    for i, f in enumerate(feats):
        for j, t in enumerate(f.tokens):
            if j in f.token_to_orig_map:
                start[i, j] = 8.0 if t == start_piece else 0.0
                end[i, j] = 8.0 if t == end_piece else 0.0
    return start, end


def test_best_span_maps_back_to_exact_original_characters(tmp_path, tokenizer):
    path = _squad_json(tmp_path / "dev.json", [
        {"id": "year", "question": "when was it ?", "answers": []},
        {"id": "name", "question": "what name ?", "answers": []}])
    examples = squad.read_squad_examples(path, is_training=False)
    feats = squad.convert_examples_to_features(examples, tokenizer, 20, 4, 8, False)
    assert len({f.example_index for f in feats}) == 2 and len(feats) > 10
    s1, e1 = _peaked_logits(feats, "1895", "##built", 20)
    s2, e2 = _peaked_logits(feats, "cafe", "noir", 20)
    use_first = np.array([f.example_index == 0 for f in feats])[:, None]
    start, end = np.where(use_first, s1, s2), np.where(use_first, e1, e2)
    preds, nbest, odds = squad.postprocess(examples, feats, start, end, n_best_size=5,
                                           max_answer_length=10, do_lower_case=True)
    # spacing inside the answer is the context's own (two spaces), accents and case restored,
    # trailing punctuation of the word dropped
    assert preds["year"] == "1895  (rebuilt"
    assert CONTEXT[CONTEXT.index("1895"):].startswith(preds["year"])
    assert preds["name"] == "Café-Noir"
    assert odds == {}
    top = nbest["name"][0]
    assert top["text"] == "Café-Noir" and top["start_logit"] == 8.0 and top["end_logit"] == 8.0
    assert sum(e["probability"] for e in nbest["name"]) == pytest.approx(1.0)
    assert len({e["text"] for e in nbest["name"]}) == len(nbest["name"])  # de-duplicated


def test_get_final_text():
    assert squad.get_final_text("cafe - noir", "Café-Noir,", True) == "Café-Noir"
    assert squad.get_final_text("noir", "Café-Noir,", True) == "Noir"
    assert squad.get_final_text("1895", "(1895-1943).", True) == "1895"
    assert squad.get_final_text("Noir", "Café-Noir,", False) == "Noir"
    # no alignment: the whole original words, as the original release
    assert squad.get_final_text("xyz", "Café-Noir,", True) == "Café-Noir,"
    assert squad.get_final_text("ab", "a\u200bb", True) == "a\u200bb"  # deleted char


def test_v2_null_answer_threshold(tmp_path, tokenizer):
    path = _squad_json(tmp_path / "dev.json", [
        {"id": "q", "question": "when was it ?", "answers": [], "is_impossible": True}],
        context=TARGET)
    examples = squad.read_squad_examples(path, False, version_2_with_negative=True)
    feats = squad.convert_examples_to_features(examples, tokenizer, 32, 8, 8, False)
    assert len(feats) == 1
    f = feats[0]
    start = np.full((1, 32), -5.0, np.float32)
    end = np.full((1, 32), -5.0, np.float32)
    start[0, 0], end[0, 0] = 1.0, 1.0                       # null score 2.0
    start[0, f.tokens.index("1895")] = 1.0                  # best span 1.0 + 0.5 = 1.5
    end[0, f.tokens.index("1895")] = 0.5
    args = dict(n_best_size=3, max_answer_length=5, do_lower_case=True,
                version_2_with_negative=True)
    preds, nbest, odds = squad.postprocess(examples, feats, start, end,
                                           null_score_diff_threshold=0.0, **args)
    assert odds == {"q": 0.5} and preds == {"q": ""}
    assert "" in [e["text"] for e in nbest["q"]]
    preds, _, _ = squad.postprocess(examples, feats, start, end,
                                    null_score_diff_threshold=0.6, **args)
    assert preds == {"q": "1895"}
    # v1 decoding ignores the null score
    preds, _, odds = squad.postprocess(examples, feats, start, end, n_best_size=3,
                                       max_answer_length=5, do_lower_case=True)
    assert preds == {"q": "1895"} and odds == {}


def test_v2_null_score_is_minimum_over_windows(tmp_path, tokenizer):
    path = _squad_json(tmp_path / "dev.json", [
        {"id": "q", "question": "when was it ?", "answers": []}])
    examples = squad.read_squad_examples(path, False, True)
    feats = squad.convert_examples_to_features(examples, tokenizer, 20, 4, 8, False)
    start, end = _peaked_logits(feats, "1895", "##built", 20)
    start[:, 0], end[:, 0] = 9.0, 9.0    # null 18 everywhere ...
    start[2, 0], end[2, 0] = 5.0, 6.0    # ... but 11 in window 2: the minimum counts
    _, nbest, odds = squad.postprocess(examples, feats, start, end, 5, 10, True, True, 0.0)
    assert odds["q"] == pytest.approx(11.0 - 16.0)
    null = [e for e in nbest["q"] if e["text"] == ""][0]
    assert (null["start_logit"], null["end_logit"]) == (5.0, 6.0)


def test_reading_errors(tmp_path):
    with pytest.raises(BertError, match=r"nope\.json: SQuAD file not found"):
        squad.read_squad_examples(str(tmp_path / "nope.json"), False)
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(BertError, match=r"bad\.json: not valid JSON"):
        squad.read_squad_examples(str(bad), False)
    path = _squad_json(tmp_path / "t.json", [{"id": "x", "question": "q?", "answers": [],
                                              "is_impossible": True}])
    with pytest.raises(BertError, match=r"\(x\): no answer to train on"):
        squad.read_squad_examples(path, True)
    ex = squad.read_squad_examples(path, True, version_2_with_negative=True)[0]
    assert ex.is_impossible and (ex.start_position, ex.end_position) == (-1, -1)


def test_misaligned_training_answer_is_skipped(tmp_path):
    path = _squad_json(tmp_path / "t.json", [
        {"id": "ok", "question": "q?", "answers": [{"text": "w1", "answer_start": 3}]},
        {"id": "bad", "question": "q?", "answers": [{"text": "w9", "answer_start": 3}]}])
    assert [e.qas_id for e in squad.read_squad_examples(path, True)] == ["ok"]


def _tiny_model_files(folder):
    """vocab.txt (VOCAB) and bert_config.json (configs/tiny_test.json at that vocab) in
    `folder`; returns the vocab's path."""
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    with open(os.path.join(os.path.dirname(__file__), "..", "configs", "tiny_test.json")) as f:
        cfg = json.load(f)
    cfg["vocab_size"] = len(VOCAB)
    (folder / "bert_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return vocab


def test_run_squad_v2_predict_writes_null_odds_and_v2_eval(tmp_path, tokenizer):
    """run_squad --version_2_with_negative --do_predict (weights as initialised): the three
    JSON files agree with each other and with the threshold rule; eval_results.txt is the
    official v2.0 report of them."""
    from bert_tf.tasks import squad_metrics
    vocab = _tiny_model_files(tmp_path)
    start = CONTEXT.index("1895")
    path = _squad_json(tmp_path / "dev.json", [
        {"id": "a", "question": "when was it ?",
         "answers": [{"text": "1895", "answer_start": start}]},
        {"id": "b", "question": "what name ?", "answers": [], "is_impossible": True},
        {"id": "c", "question": "when ?", "answers": [], "is_impossible": True}])
    out = tmp_path / "out"
    result = squad.run(squad.SquadConfig(
        vocab_file=str(vocab), bert_config_file=str(tmp_path / "bert_config.json"),
        output_dir=str(out), predict_file=path, do_predict=True, version_2_with_negative=True,
        max_seq_length=20, doc_stride=4, max_query_length=8, predict_batch_size=4,
        n_best_size=4, max_answer_length=6, seed=3, progress=False))
    preds = json.load(open(out / "predictions.json", encoding="utf-8"))
    nbest = json.load(open(out / "nbest_predictions.json", encoding="utf-8"))
    odds = json.load(open(out / "null_odds.json", encoding="utf-8"))
    assert list(preds) == list(nbest) == list(odds) == ["a", "b", "c"]
    for q in preds:
        entries = nbest[q]
        null = [e for e in entries if e["text"] == ""]
        best = next(e for e in entries if e["text"])
        assert len(null) == 1 and len(entries) <= 5
        assert odds[q] == pytest.approx(null[0]["start_logit"] + null[0]["end_logit"]
                                        - best["start_logit"] - best["end_logit"], abs=1e-5)
        assert preds[q] == ("" if odds[q] > 0.0 else best["text"])
        assert not best["text"] or best["text"] in CONTEXT  # exact context characters
    want = squad_metrics.evaluate_v2(json.load(open(path, encoding="utf-8")), preds, odds)
    assert result["eval"] == dict(want, global_step=0)
    got = {}
    for line in open(out / "eval_results.txt", encoding="utf-8"):
        k, v = line.rstrip("\n").split(" = ")
        got[k] = float(v)
    assert got == pytest.approx(dict(want, global_step=0))
    assert {"HasAns_exact", "NoAns_exact", "best_f1", "best_f1_thresh"} <= set(got)


def test_run_squad_predictions_equal_cut_and_padded(tmp_path):
    """Short contexts in long features: the cut run's n-best (padding never ranked) is the
    padded run's, text for text, logits within 1e-5 (issue 38)."""
    vocab = _tiny_model_files(tmp_path)
    contexts = [TARGET, " ".join(FILLER[:6]) + " " + TARGET, "w1 w2 w3 cafe noir w4"]
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": c, "qas": [{"id": f"q{i}", "question": "when was it ?",
                                "answers": [{"text": c.split()[0], "answer_start": 0}]}]}
        for i, c in enumerate(contexts)]}]}
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    out = {}
    for pad in (False, True):
        d = tmp_path / f"pad{pad}"
        squad.run(squad.SquadConfig(
            vocab_file=str(vocab), bert_config_file=str(tmp_path / "bert_config.json"),
            output_dir=str(d), predict_file=str(path), do_predict=True, max_seq_length=64, max_query_length=8,
            predict_batch_size=2, n_best_size=3, max_answer_length=4, seed=3,
            progress=False, pad_to_max_seq_length=pad))
        out[pad] = [json.load(open(d / name, encoding="utf-8"))
                    for name in ("predictions.json", "nbest_predictions.json")]
    (cut_preds, cut_nbest), (pad_preds, pad_nbest) = out[False], out[True]
    assert cut_preds == pad_preds and list(cut_preds) == ["q0", "q1", "q2"]
    for q in cut_nbest:
        assert [e["text"] for e in cut_nbest[q]] == [e["text"] for e in pad_nbest[q]]
        for a, b in zip(cut_nbest[q], pad_nbest[q]):
            for k in ("start_logit", "end_logit", "probability"):
                assert a[k] == pytest.approx(b[k], abs=1e-5)
