"""create_pretraining_data, mode `original`: golden records, the random stream, reading, schema.

The golden file (tests/data/pretraining/golden.json) holds every record of a small run on the
checked-in corpus/vocab. `test_first_instance_rederived_step_by_step` re-derives the first
instance's draws from `random.Random(12345)` by hand, independently of the library, and checks
it against both the library and the golden file. Regenerate the golden with
`BERT_TF_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_pretraining_data_original.py`.
"""
import gzip
import hashlib
import json
import os
import random

import pytest

import bert_tf  # noqa: F401
from bert_tf import BertError
from bert_tf.pretraining_data import original, schema
from bert_tf.pretraining_data.runner import Options, run
from bert_tf.tokenization import FullTokenizer

DATA = os.path.join(os.path.dirname(__file__), "data", "pretraining")
CORPUS = os.path.join(DATA, "corpus.txt")
VOCAB = os.path.join(DATA, "vocab.txt")
GOLDEN = os.path.join(DATA, "golden.json")
GOLDEN_FLAGS = dict(max_seq_length=24, max_predictions_per_seq=4, dupe_factor=2,
                    random_seed=12345, masked_lm_prob=0.15, short_seq_prob=0.1)


def _run(tmp_path, name="out.tfrecord", **kw):
    out = ",".join(str(tmp_path / n) for n in name.split(","))
    flags = dict(GOLDEN_FLAGS, input_file=CORPUS, vocab_file=VOCAB, output_file=out,
                 progress=False)
    flags.update(kw)
    return run(Options(**flags))


def _records(paths, max_seq_length=24, max_predictions_per_seq=4):
    """Parsed records as lists, padding removed (what the golden file stores)."""
    out = []
    for r in schema.parse_records(paths, max_seq_length, max_predictions_per_seq):
        n, m = int(r["input_mask"].sum()), int(r["masked_lm_weights"].sum())
        out.append({
            "input_ids": r["input_ids"][:n].tolist(),
            "segment_ids": r["segment_ids"][:n].tolist(),
            "masked_lm_positions": r["masked_lm_positions"][:m].tolist(),
            "masked_lm_ids": r["masked_lm_ids"][:m].tolist(),
            "next_sentence_labels": int(r["next_sentence_labels"][0]),
        })
    return out


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _first_created_instance(**flags):
    """The library's first instance, before the final shuffle (what the hand derivation checks)."""
    tokenizer = FullTokenizer(VOCAB)
    docs = original.read_documents([CORPUS], tokenizer)
    rng = random.Random(flags.get("random_seed", 12345))
    rng.shuffle(docs)
    inst = original.create_instances_from_document(
        docs, 0, 24, 0.1, 0.15, 4, list(tokenizer.vocab.keys()), rng)[0]
    return {"tokens": inst.tokens, "segment_ids": inst.segment_ids,
            "masked_lm_positions": inst.masked_lm_positions,
            "masked_lm_labels": inst.masked_lm_labels, "is_random_next": inst.is_random_next}


def _make_golden(tmp_path):
    golden = {"flags": GOLDEN_FLAGS, "corpus": "corpus.txt", "vocab": "vocab.txt", "runs": {}}
    for key, extra in (("default", {}), ("do_whole_word_mask", {"do_whole_word_mask": True})):
        d = tmp_path / key
        d.mkdir()
        _run(d, **extra)
        records = _records([str(d / "out.tfrecord")])
        golden["runs"][key] = {"extra_flags": extra, "num_records": len(records),
                               "sha256": _sha256(d / "out.tfrecord"), "records": records}
    golden["first_created_instance"] = _first_created_instance()
    return golden


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    if os.environ.get("BERT_TF_REGEN_GOLDEN"):
        data = _make_golden(tmp_path_factory.mktemp("golden"))
        with open(GOLDEN, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    with open(GOLDEN) as f:
        return json.load(f)


# ---- golden ----------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["default", "do_whole_word_mask"])
def test_records_match_golden(tmp_path, golden, key):
    run_golden = golden["runs"][key]
    _run(tmp_path, **run_golden["extra_flags"])
    records = _records([str(tmp_path / "out.tfrecord")])
    assert len(records) == run_golden["num_records"]
    assert records == run_golden["records"]
    assert _sha256(tmp_path / "out.tfrecord") == run_golden["sha256"]


def test_golden_first_records_spelled_out(golden):
    """Human-checkable anchor: the first written record in tokens."""
    tokenizer = FullTokenizer(VOCAB)
    first = golden["runs"]["default"]["records"][0]
    assert " ".join(tokenizer.convert_ids_to_tokens(first["input_ids"])) == (
        "[CLS] clock ##s tick . [SEP] [MASK] ##s swing slowly back [MASK] forth . [SEP]")
    assert first["segment_ids"] == [0] * 6 + [1] * 9
    assert first["masked_lm_positions"] == [6, 11]
    assert tokenizer.convert_ids_to_tokens(first["masked_lm_ids"]) == ["pendulum", "and"]
    assert first["next_sentence_labels"] == 0
    # 15 tokens -> round(15 * 0.15) = 2 predictions; "tick" -> "very" is a random replacement.
    second = golden["runs"]["default"]["records"][1]
    assert " ".join(tokenizer.convert_ids_to_tokens(second["input_ids"])) == (
        "[CLS] clock ##s very . [SEP] pendulum [MASK] swing slowly back and forth . [SEP]")
    assert golden["runs"]["default"]["num_records"] == 20


def test_first_instance_rederived_step_by_step(golden):
    """Replays the original's draws for the first instance with a bare random.Random."""
    tokenizer = FullTokenizer(VOCAB)
    vocab_words = list(tokenizer.vocab.keys())
    # Reading: one sentence per line, blank line = new document, empty documents dropped.
    docs = [[]]
    with open(CORPUS, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                docs.append([])
                continue
            docs[-1].append(tokenizer.tokenize(line))
    docs = [d for d in docs if d]
    assert [len(d) for d in docs] == [4, 3, 5, 2, 3]

    rng = random.Random(12345)
    rng.shuffle(docs)                                   # draw 1: document shuffle
    assert docs[0][0][:3] == ["un", "##want", "##ed"]   # "Unwanted running wasn't planned." first
    doc, max_num_tokens = docs[0], 24 - 3
    target = max_num_tokens
    short = rng.random()                                # draw 2: short target?
    assert short >= 0.1                                 # no: target stays 21
    # Sentences accumulate until the target is reached (or the document ends).
    chunk, length, i = [], 0, 0
    while True:
        chunk.append(doc[i])
        length += len(doc[i])
        if i == len(doc) - 1 or length >= target:
            break
        i += 1
    assert [len(s) for s in chunk] == [10, 8, 7] and length == 25
    a_end = rng.randint(1, len(chunk) - 1)              # draw 3: split point
    assert a_end == 2
    tokens_a = chunk[0] + chunk[1]
    coin = rng.random()                                 # draw 4: random next?
    assert coin >= 0.5                                  # no: actual next
    is_random_next = False
    tokens_b = list(chunk[2])
    # Truncation: 18 + 7 > 21, so 4 tokens go from the longer side (A), front or back.
    while len(tokens_a) + len(tokens_b) > max_num_tokens:   # draws 5-8
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()
    assert (len(tokens_a), len(tokens_b)) == (14, 7)
    tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b + ["[SEP]"]
    segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
    # Masking: shuffle singleton candidate lists, take min(4, round(24 * 0.15)) = 4 of them.
    cand = [[j] for j, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]")]
    rng.shuffle(cand)                                   # draws 9..: candidate shuffle
    num_to_predict = min(4, max(1, int(round(len(tokens) * 0.15))))
    assert num_to_predict == 4
    output, masked = list(tokens), []
    for (j,) in cand[:num_to_predict]:
        if rng.random() < 0.8:
            output[j] = "[MASK]"
        elif rng.random() < 0.5:
            pass                                        # keep
        else:
            output[j] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
        masked.append((j, tokens[j]))
    masked.sort()

    derived = {"tokens": output, "segment_ids": segment_ids,
               "masked_lm_positions": [j for j, _ in masked],
               "masked_lm_labels": [t for _, t in masked], "is_random_next": is_random_next}
    assert derived == _first_created_instance()
    assert derived == golden["first_created_instance"]
    # ... and it is among the written records (the final shuffle moves it).
    ids = tokenizer.convert_tokens_to_ids(output)
    assert any(r["input_ids"] == ids and r["masked_lm_positions"] == derived["masked_lm_positions"]
               for r in golden["runs"]["default"]["records"])


# ---- determinism, outputs --------------------------------------------------------------------

def test_two_runs_are_byte_identical(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _run(tmp_path / "a", dupe_factor=3)
    _run(tmp_path / "b", dupe_factor=3)
    assert (tmp_path / "a" / "out.tfrecord").read_bytes() == (tmp_path / "b" / "out.tfrecord").read_bytes()
    assert not [p for p in os.listdir(tmp_path / "a") if ".tmp-" in p]


def test_round_robin_over_output_files(tmp_path, golden):
    _run(tmp_path, name="x.tfrecord,y.tfrecord")
    x = _records([str(tmp_path / "x.tfrecord")])
    y = _records([str(tmp_path / "y.tfrecord")])
    expected = golden["runs"]["default"]["records"]
    assert x == expected[0::2] and y == expected[1::2]


def test_stats_file(tmp_path, golden):
    data = _run(tmp_path)
    with open(tmp_path / ".bert_tf" / "out.tfrecord.stats.json") as f:
        on_disk = json.load(f)
    assert on_disk["totals"] == data["totals"]
    totals = data["totals"]
    records = golden["runs"]["default"]["records"]
    assert totals["instances"] == len(records)
    assert totals["tokens"] == sum(len(r["input_ids"]) for r in records)
    assert totals["masked"] == sum(len(r["masked_lm_positions"]) for r in records)
    assert totals["nsp_random_next"] == sum(r["next_sentence_labels"] for r in records)
    assert totals["documents"] == 5 and totals["sentences"] == 17
    assert totals["masked_as_mask"] + totals["masked_kept"] + totals["masked_random"] == totals["masked"]


def test_learned_vocab(tmp_path):
    pytest.importorskip("bert_tf.tokenization.vocab_builder")
    data = _run(tmp_path, vocab_file=str(tmp_path / "learned_vocab.txt"), learn_vocab_size=120,
                dupe_factor=1)
    assert (tmp_path / "learned_vocab.txt").exists() and data["totals"]["instances"] > 0
    tokenizer = FullTokenizer(str(tmp_path / "learned_vocab.txt"))
    for r in _records([str(tmp_path / "out.tfrecord")]):
        assert max(r["input_ids"]) < len(tokenizer.vocab)


# ---- reading -----------------------------------------------------------------------------------

def _tok():
    return FullTokenizer(VOCAB)


def test_documents_continue_across_files_like_the_original(tmp_path):
    (tmp_path / "a.txt").write_text("The cat sat.\n\nThe dog ran.\n")  # no trailing blank line
    (tmp_path / "b.txt").write_text("Snow fell.\n\nEat bread.\n")
    docs = original.read_documents([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")], _tok())
    assert docs == [[["the", "cat", "sat", "."]],
                    [["the", "dog", "ran", "."], ["snow", "fell", "."]],
                    [["eat", "bread", "."]]]


def test_gzip_and_globs(tmp_path):
    text = open(CORPUS, encoding="utf-8").read()
    lines = text.split("\n")
    (tmp_path / "p1.txt").write_text("\n".join(lines[:10]) + "\n")
    with gzip.open(tmp_path / "p2.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(lines[10:]))
    out = tmp_path / "out"
    out.mkdir()
    _run(out, input_file=f"{tmp_path}/p1.*,{tmp_path}/p2.txt.gz")
    ref = tmp_path / "ref"
    ref.mkdir()
    _run(ref)
    assert (out / "out.tfrecord").read_bytes() == (ref / "out.tfrecord").read_bytes()


def test_invalid_utf8_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine line\n\nsecond doc\ncaf\xe9 latin-1\n")
    with pytest.raises(BertError, match=r"bad\.txt: line 4 is not valid UTF-8"):
        _run(tmp_path, input_file=str(bad))
    assert not [p for p in os.listdir(tmp_path) if p != "bad.txt"]


def test_crlf_and_whitespace_only_lines(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"The cat sat.\r\n \t\r\nThe dog ran.\r\n")
    docs = original.read_documents([str(tmp_path / "a.txt")], _tok())
    assert docs == [[["the", "cat", "sat", "."]], [["the", "dog", "ran", "."]]]


# ---- schema ----------------------------------------------------------------------------------

def test_feature_spec():
    import tensorflow as tf
    spec = schema.feature_spec(128, 20)
    assert tuple(spec) == schema.FEATURE_NAMES == (
        "input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
        "masked_lm_weights", "next_sentence_labels")
    for name, feature in spec.items():
        assert isinstance(feature, tf.io.FixedLenFeature)
        assert feature.dtype == (tf.float32 if name == "masked_lm_weights" else tf.int64)
    assert [spec[n].shape for n in schema.FEATURE_NAMES] == [[128]] * 3 + [[20]] * 3 + [[1]]


def test_fast_encoders_match_proto_serialization():
    rng = random.Random(3)
    enc = schema.RecordEncoder(40, 6)
    for _ in range(200):
        n = rng.randint(5, 40)
        la = rng.randint(1, n - 4)
        ids = [rng.choice((rng.randrange(128), rng.randrange(30000), rng.randrange(70000, 200000)))
               for _ in range(n)]
        pos = sorted(rng.sample(range(n), rng.randint(0, 6)))
        labels = [rng.randrange(30522) for _ in pos]
        nsp = rng.random() < 0.5
        features = schema.pad_features(ids, [0] * (la + 2) + [1] * (n - la - 2), pos, labels,
                                       nsp, 40, 6)
        proto = schema.serialize_example(features)
        assert schema.encode_example(features) == proto
        assert enc.encode(ids, la + 2, pos, labels, nsp) == proto


def test_example_round_trip():
    import tensorflow as tf
    features = schema.pad_features([2, 7, 3, 8, 9, 3], [0, 0, 0, 1, 1, 1], [1, 4], [7, 9], True, 8, 3)
    parsed = tf.io.parse_single_example(schema.serialize_example(features), schema.feature_spec(8, 3))
    assert parsed["input_ids"].numpy().tolist() == [2, 7, 3, 8, 9, 3, 0, 0]
    assert parsed["input_mask"].numpy().tolist() == [1, 1, 1, 1, 1, 1, 0, 0]
    assert parsed["masked_lm_weights"].numpy().tolist() == [1.0, 1.0, 0.0]
    assert parsed["next_sentence_labels"].numpy().tolist() == [1]
