"""Exports compute only a batch's real tokens (issue 38): every signature of every task, on
batches mixing short and long texts (and pairs), equals the padded (uncut) computation of the
same export code within 1e-5; the encoder really ran at the cut length; a full-length batch
takes exactly the uncut shapes; padding positions hold their documented values.

The uncut reference is the same module class built with `common.cut_inputs` patched to keep
the whole length, so every post-processing step (pooling, span decoding, fill-mask) is compared
too. Modules are used in memory: saved exports are covered by tests/test_export.py.
"""
import numpy as np
import pytest

import bert_tf  # noqa: F401
import tensorflow as tf

from bert_tf import tokenization
from bert_tf.export import common
from bert_tf.export.encoder import EncoderModule
from bert_tf.export.end_to_end import EndToEndModule, IdsModule
from bert_tf.export.preprocessor import TextPreprocessor
from conftest import original_pack, task_models

SEQ = 32
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", "the", "quick", "brown", "fox",
         "jump", "##s", "over", "lazy", "dog", "a", "is", "of", "capital", "france", "paris",
         "who", "cat", "sat", "on", "mat", "city"]
LONG = " ".join(["the quick brown fox jumps over the lazy dog."] * 5)
SHORT = ["the cat", "", "who is the quick fox?", "paris is a city."]       # <= 8 tokens packed
MIXED = ["the cat sat on the mat.", "", "who jumps over the lazy dog?", "a city"]  # 16
PAIRS = (["who jumps?", "the cat", "", "paris"], ["the quick brown fox", "", "a cat sat", "city"])
MASKED = ["the capital of france is [MASK].", "[MASK] sat on the [MASK] mat .", "no", ""]


def pack_batch(rows):
    cols = list(zip(*rows))
    return {k: np.array(v, np.int32) for k, v in
            zip(("input_word_ids", "input_mask", "input_type_ids"), cols)}


class Recorder:
    """Calls the model; records the sequence length it was given (a tf.Variable, so the
    graph's value is visible after the call)."""

    def __init__(self, model):
        self.model = model
        self.length = tf.Variable(-1)

    def __call__(self, inputs, training=False):
        self.length.assign(tf.shape(inputs["input_word_ids"])[1])
        return self.model(inputs, training=training)


def uncut_inputs(inputs, at_least=None):
    """`common.cut_inputs` as if nothing were cut: the padded computation."""
    return dict(inputs), tf.shape(inputs["input_mask"])[1]


class Env:
    def __init__(self, base):
        self.vocab = str(base / "vocab.txt")
        (base / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
        self.tok = tokenization.FullTokenizer(self.vocab, do_lower_case=True)
        # One in-graph preprocessor for every module: its tokenizer is traced once for the
        # file (seconds per module otherwise); what is compared is the model's cut.
        self.preprocessing = TextPreprocessor(self.vocab, True, SEQ)
        self.models = task_models(len(VOCAB), seed=7)
        # Heads away from their initialisers, so task outputs are not near-constant.
        rng = np.random.default_rng(0)
        for m in self.models.values():
            for w in m.weights:
                if "encoder" not in w.path:
                    w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return Env(tmp_path_factory.mktemp("real_length"))


def modules(env, task, ids_only=False):
    """(cut module, its Recorder, uncut module). The uncut module only serves `predict_ids`
    (traced inside the patch, `call_uncut`): one trace, no tokenizer."""
    kwargs = {"pooling": "mean"} if task == "embeddings" else {}
    make = (lambda: IdsModule(env.models[task], task, SEQ, **kwargs)) if ids_only else (
        lambda: EndToEndModule(env.models[task], env.vocab, True, task, SEQ,
                               preprocessing=env.preprocessing, **kwargs))
    cut, uncut = make(), make()
    rec = Recorder(cut._core.obj)
    cut._core = common.Ref(rec)
    return cut, rec, uncut


def call_uncut(fn, *args):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(common, "cut_inputs", uncut_inputs)
        return fn(*args)


def assert_same(got, want, where):
    assert sorted(got) == sorted(want), where
    for k in want:
        g, w = np.asarray(got[k]), np.asarray(want[k])
        assert g.shape == w.shape and g.dtype == w.dtype, (where, k, g.shape, w.shape)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, atol=1e-5, rtol=0, err_msg=f"{where} {k}")
        else:
            assert g.tolist() == w.tolist(), (where, k)


def numpy_dict(out):
    return {k: v.numpy() for k, v in out.items()}


def py_ids(env, text, masks):
    """Python WordPiece ids; with masks, a literal [MASK] is the mask id (as the export)."""
    parts = text.split("[MASK]") if masks else [text]
    out = []
    for i, part in enumerate(parts):
        out += env.tok.convert_tokens_to_ids(env.tok.tokenize(part))
        out += [4] if i < len(parts) - 1 else []
    return out


def py_batch(env, texts, texts_b=None, masks=False):
    return pack_batch([original_pack(py_ids(env, a, masks),
                                     py_ids(env, b, masks) if texts_b else None, SEQ, 2, 3)
                       for a, b in zip(texts, texts_b or texts)])


def check(cut, rec, uncut, name, args, ids, where):
    """`cut.<name>(*args)` equals the uncut predict_ids on the same packed `ids`; returns
    (outputs, the length the model ran at)."""
    got = numpy_dict(getattr(cut, name)(*args))
    length = int(rec.length.numpy())
    want = numpy_dict(call_uncut(uncut.predict_ids, *ids.values()))
    assert_same(got, want, where)
    return got, length


# slow: [embeddings] (classification and regression serve pooled outputs through the same cut)
@pytest.mark.parametrize("task", ["embeddings", "fill_mask",
                                  pytest.param("classification", marks=pytest.mark.slow), "span",
                                  "tagging", pytest.param("regression", marks=pytest.mark.slow)])
def test_every_signature_equals_the_padded_computation(env, task):
    cut, rec, uncut = modules(env, task)
    fm = task == "fill_mask"
    single = MASKED if fm else MIXED
    ids = py_batch(env, single, masks=fm)
    got, length = check(cut, rec, uncut, "__call__", [tf.constant(single)], ids,
                        f"{task} serving_default")
    mask = ids["input_mask"]
    real = int(mask.sum(1).max())
    assert 8 < real <= 16 and length == 16, (real, length)   # rounded up to a multiple of 8
    if task == "embeddings":  # padding positions hold 0.0; real ones the model's values
        seq = got["sequence_output"]
        assert (seq[mask == 0] == 0).all() and np.abs(seq[mask == 1]).min() > 0
    if task == "tagging":
        assert (got["logits"][mask == 0] == 0).all() and (got["tag_ids"][mask == 0] == -1).all()
    if task == "span":
        assert (got["start_logits"][mask == 0] == common.SPAN_PAD_LOGIT).all()
        assert (got["start_index"] >= 0).tolist() == [True, False, True, True]  # "": none
    if fm:
        assert got["mask_count"].tolist() == [1, 2, 0, 0]
    # predict_ids (the pre-tokenized route, both dims dynamic)
    _, length = check(cut, rec, uncut, "predict_ids", ids.values(), ids, f"{task} predict_ids")
    assert length == 16
    # pairs (question, context for span)
    a, b = (MASKED, ["[MASK] dog", "", "a cat", "city"]) if fm else PAIRS
    pairs = py_batch(env, a, b, masks=fm)
    _, length = check(cut, rec, uncut, "serve_pairs", [tf.constant(a), tf.constant(b)], pairs,
                      f"{task} serving_pairs")
    assert length == -(-int(pairs["input_mask"].sum(1).max()) // 8) * 8 < SEQ
    _, length = check(cut, rec, uncut, "__call__", [tf.constant(SHORT)], py_batch(env, SHORT),
                      f"{task} short")
    assert length == 8
    # a batch with a full-length text: exactly the uncut shapes, and no cut
    got, length = check(cut, rec, uncut, "__call__", [tf.constant(SHORT + [LONG])],
                        py_batch(env, SHORT + [LONG]), f"{task} full length")
    assert length == SEQ
    # an empty batch
    empty = {k: np.zeros([0, SEQ], np.int32) for k in ids}
    check(cut, rec, uncut, "predict_ids", empty.values(), empty, f"{task} empty batch")


def test_ids_only_span_export_cuts_too(env):
    cut, rec, uncut = modules(env, "span", ids_only=True)
    ids = pack_batch([original_pack([7, 8, 9], [23, 24], SEQ, 2, 3),
                      original_pack([21, 17], None, SEQ, 2, 3)])
    got, length = check(cut, rec, uncut, "__call__", ids.values(), ids, "ids-only span")
    assert length == 8 and got["start_index"].tolist()[0] >= 5   # in the context


def test_encoder_export_cuts_inside(env, monkeypatch):
    model = env.models["fill_mask"]
    seen = tf.Variable(-1)
    run_cut = EncoderModule.run_cut

    def recording(self, cut, training=False):  # the encoder modules trace at construction
        seen.assign(tf.shape(cut["input_word_ids"])[1])
        return run_cut(self, cut, training)
    monkeypatch.setattr(EncoderModule, "run_cut", recording)
    cut = EncoderModule(model)
    uncut = call_uncut(EncoderModule, model)
    rows = [original_pack([7, 8, 9, 10], [11, 12, 13], SEQ, 2, 3),
            original_pack([23], None, SEQ, 2, 3), original_pack([16] * 12, None, SEQ, 2, 3)]
    ids = pack_batch(rows)                       # longest: 14 real tokens -> cut to 16
    x = {k: tf.constant(v) for k, v in ids.items()}
    both = lambda fn, *args: (numpy_dict(fn(cut)(*args)), int(seen.numpy()),
                              numpy_dict(call_uncut(fn(uncut), *args)))
    got, length, want = both(lambda m: m.serve_flat, *x.values())
    assert_same(got, want, "encoder serving_default")
    assert length == 16
    assert (got["encoder_outputs"].transpose(1, 0, 2, 3)[:, ids["input_mask"] == 0] == 0).all()
    g, length, w = both(lambda m: lambda: {k: v for k, v in m(x).items()
                                           if k != "encoder_outputs"})
    assert_same(g, w, "encoder __call__")
    assert length == 16
    # mlm: a position in the padding (30) keeps the cut long enough to gather it
    pos = tf.constant([[1, 2, 0], [1, 0, 0], [30, 5, 3]], tf.int32)
    for p, cut_to in ((pos, SEQ), (pos[:, 1:], 16)):
        mlm = lambda m: lambda: {k: v for k, v in m.mlm(dict(x, masked_lm_positions=p)).items()
                                 if k != "encoder_outputs"}
        g, length, w = both(mlm)
        assert_same(g, w, "encoder mlm")
        assert length == cut_to
    np.testing.assert_allclose(
        g["mlm_logits"], np.asarray(model(dict(ids, masked_lm_positions=pos[:, 1:]),
                                          training=False)["mlm_logits"]), atol=1e-5, rtol=0)
    # a full-length batch: exactly the shapes of the uncut export
    full = pack_batch([original_pack([16] * 40, None, SEQ, 2, 3)] + rows[:1])
    got, length, want = both(lambda m: m.serve_flat, *full.values())
    assert_same(got, want, "encoder full length")
    assert length == SEQ and got["encoder_outputs"].shape == (2, 2, SEQ, 32)
