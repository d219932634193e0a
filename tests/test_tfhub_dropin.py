"""The parts of Model Garden's TF Hub exports that code may call beyond `__call__`, on ours
(no peers needed; tests/test_peers_tfhub.py runs the same calls on Model Garden's exports):
the encoder's `mlm` sub-model, `vocab_file` asset and `do_lower_case` variable, and the
preprocessor's `tokenize_with_offsets` and `tokenize.get_special_tokens_dict()`.

Exports are reloaded with plain `tf.saved_model.load`; references are the Keras model and the
Python FullTokenizer.
"""
import os
import types

import numpy as np
import pytest

import bert_tf  # noqa: F401
import keras
import tensorflow as tf

from bert_tf import BertError, tokenization
from bert_tf.export import export_encoder, export_preprocessor, serving_ops
from bert_tf.modeling import encoder as be
from bert_tf.modeling import models as bm
from conftest import tiny_bert_config

SEQ = 16
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!", "the", "quick", "brown",
         "fox", "jump", "##s", "##ed", "over", "lazy", "dog", "caf", "##e", "na", "##ive", "un",
         "##want", "run", "##ning", "北", "京", "a", "cat", "σ", "##ς"]
TEXTS = ["The quick brown fox jumps!", "Café  cafe\u0301 naïve", "", "北京 unwanted x\x00y",
         "RUNNING\tdog 😀 " + "a" * 201, "  ΣΣ.  "]
LAYERS = 1
BAD_UTF8 = b"fox\xff jumped \xe2\x82"  # invalid bytes are dropped, as the tokenizer does


class Env:
    def __init__(self, base):
        self.vocab = os.path.join(base, "vocab.txt")
        with open(self.vocab, "w", encoding="utf-8") as f:
            f.write("\n".join(VOCAB) + "\n")
        self.tok = tokenization.FullTokenizer(self.vocab, do_lower_case=True)
        keras.utils.set_random_seed(5)
        # One layer: every export here traces the encoder (nothing here depends on depth).
        cfg = tiny_bert_config(dropout=0.1, vocab_size=len(VOCAB), num_hidden_layers=LAYERS)
        self.model = bm.build_model(bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg)))
        # Head weights away from their initialisers (zero bias, unit gamma).
        rng = np.random.default_rng(0)
        for w in self.model.masked_lm.weights:
            w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
        self.enc_dir = export_encoder(self.model, os.path.join(base, "enc"),
                                      vocab_file=self.vocab, do_lower_case=True)
        self.pre_dir = export_preprocessor(self.vocab, True, os.path.join(base, "pre"), SEQ)
        self.enc = tf.saved_model.load(self.enc_dir)
        self.pre = tf.saved_model.load(self.pre_dir)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return Env(str(tmp_path_factory.mktemp("dropin")))


def mlm_inputs(env, texts=("The quick brown fox jumps!", "unwanted dog", "the cat")):
    x = env.pre(tf.constant(list(texts)))
    positions = tf.constant([[1, 2, 5], [3, 1, 0], [2, 2, 15]], tf.int32)[:len(texts)]
    return dict(x, masked_lm_positions=positions)


def test_encoder_mlm_equals_the_pretraining_models_logits(env):
    x = mlm_inputs(env)
    out = env.enc.mlm(x)
    assert sorted(out) == ["encoder_outputs", "mlm_logits", "pooled_output", "sequence_output"]
    assert out["mlm_logits"].dtype == tf.float32 and out["mlm_logits"].shape == (3, 3, len(VOCAB))
    want = env.model(x, training=False)
    np.testing.assert_allclose(out["mlm_logits"].numpy(), np.asarray(want["mlm_logits"]),
                               atol=1e-5, rtol=0)
    assert np.abs(out["mlm_logits"].numpy()).max() > 1.0  # not a degenerate comparison
    # the encoder outputs are the root's, in the same dtypes and shapes
    root = env.enc({k: v for k, v in x.items() if k != "masked_lm_positions"})
    for k in ("pooled_output", "sequence_output"):
        np.testing.assert_array_equal(out[k].numpy(), root[k].numpy())
    assert [t.shape for t in out["encoder_outputs"]] == [(3, SEQ, 32)] * LAYERS
    # training=True turns dropout on, as in Model Garden's mlm
    drop = env.enc.mlm(x, training=True)["mlm_logits"].numpy()
    assert np.abs(drop - out["mlm_logits"].numpy()).max() > 1e-2
    # out-of-range positions are request errors, not silent zeros
    for bad in ([[16, 0, 0]] * 3, [[-1, 0, 0]] * 3, [[0, 0, 0]] * 2):
        with pytest.raises(tf.errors.InvalidArgumentError, match="masked_lm_positions must"):
            env.enc.mlm(dict(x, masked_lm_positions=tf.constant(bad, tf.int32)))


def test_encoder_mlm_and_root_variables(env):
    n = len(env.model.encoder.weights)
    assert n == 5 + 16 * LAYERS + 2
    # root: the encoder's weights (trainable) + do_lower_case (not), as Model Garden's
    assert len(env.enc.trainable_variables) == n and len(env.enc.variables) == n + 1
    assert env.enc.variables[-1] is env.enc.do_lower_case
    # mlm: the encoder's weights and the head's 5, all trainable
    assert len(env.enc.mlm.variables) == len(env.enc.mlm.trainable_variables) == n + 5
    assert {id(v) for v in env.enc.trainable_variables} <= {id(v) for v in env.enc.mlm.variables}
    assert list(env.enc.mlm.regularization_losses) == []


def test_encoder_vocab_asset_and_do_lower_case(env, tmp_path):
    path = env.enc.vocab_file.asset_path.numpy().decode()
    assert path == os.path.join(env.enc_dir, "assets", "vocab.txt")
    with open(path, "rb") as a, open(env.vocab, "rb") as b:
        assert a.read() == b.read()
    lower = env.enc.do_lower_case
    assert lower.dtype == tf.bool and lower.shape == () and lower.numpy() is np.True_
    assert not lower.trainable
    # A cased vocab, and a plain encoder: no mlm (nothing to export it from).
    cased = tf.saved_model.load(export_encoder(
        env.model.encoder, str(tmp_path / "cased"), vocab_file=env.vocab, do_lower_case=False))
    assert cased.do_lower_case.numpy() is np.False_ and not hasattr(cased, "mlm")
    assert serving_ops.unsafe_ops(serving_ops.ops_in_saved_model(env.enc_dir)) == []


def test_encoder_export_errors_are_one_line(env, tmp_path):
    out = str(tmp_path / "x")
    with pytest.raises(BertError, match=r"^export_encoder: with_mlm=True needs a model with a "
                                        r"masked-LM head \(a BertPretrainer\), got a "
                                        r"BertEncoder$"):
        export_encoder(env.model.encoder, out, with_mlm=True)
    with pytest.raises(BertError, match="^export_encoder: pass vocab_file and do_lower_case "
                                        "together$"):
        export_encoder(env.model, out, vocab_file=env.vocab)
    # One line more than the model's rows (fewer may be TPU padding: tests/test_vocab_check.py).
    long = tmp_path / "long.txt"
    long.write_text("\n".join(VOCAB + ["extra"]) + "\n")
    with pytest.raises(BertError, match=f"^{long}: {len(VOCAB) + 1} lines but the model has "
                                        f"vocab_size {len(VOCAB)} \\(wrong vocab for this "
                                        f"model\\?"):
        export_encoder(env.model, out, vocab_file=str(long), do_lower_case=True)
    assert not os.path.exists(out)


def test_with_mlm_false_and_pretraining_export_without_vocab(env, tmp_path, monkeypatch):
    from bert_tf import export
    from bert_tf.pretraining import pretraining_export
    plain = tf.saved_model.load(export_encoder(env.model, str(tmp_path / "p"), with_mlm=False))
    assert not hasattr(plain, "mlm") and not hasattr(plain, "vocab_file")
    assert len(plain.variables) == len(plain.trainable_variables)
    # run_pretraining's end-of-training export (no --vocab_file) is export_encoder with the mlm
    # (that export written and its mlm served: test_pretraining_export_without_vocab_has_the_mlm,
    # slow; export_encoder's mlm: test_encoder_mlm_equals_the_pretraining_models_logits)
    calls = []
    monkeypatch.setattr(export, "export_encoder", lambda *a, **k: calls.append((a, k)))
    out = str(tmp_path / "pt")
    assert pretraining_export.export_pretrained(env.model, out, types.SimpleNamespace(
        vocab_file=None)) == out
    assert calls == [((env.model, out), {"with_mlm": True})]


# slow: test_with_mlm_false_and_pretraining_export_without_vocab (export_pretrained without a
# vocab calls export_encoder(model, dir, with_mlm=True)) and
# test_encoder_mlm_equals_the_pretraining_models_logits (export_encoder's mlm, loaded, equal to
# the pre-training model's logits)
@pytest.mark.slow
def test_pretraining_export_without_vocab_has_the_mlm(env, tmp_path):
    from bert_tf.pretraining import pretraining_export
    # run_pretraining's end-of-training export (no --vocab_file) carries the mlm
    d = pretraining_export.export_pretrained(env.model, str(tmp_path / "pt"),
                                             types.SimpleNamespace(vocab_file=None))
    x = mlm_inputs(env)
    np.testing.assert_array_equal(tf.saved_model.load(d).mlm(x)["mlm_logits"].numpy(),
                                  env.enc.mlm(x)["mlm_logits"].numpy())


def test_get_special_tokens_dict(env):
    special = env.pre.tokenize.get_special_tokens_dict()
    assert {k: (v.dtype, v.shape, int(v)) for k, v in special.items()} == {
        "vocab_size": (tf.int32, (), len(VOCAB)), "start_of_sequence_id": (tf.int32, (), 2),
        "end_of_segment_id": (tf.int32, (), 3), "padding_id": (tf.int32, (), 0),
        "mask_id": (tf.int32, (), 4)}
    again = env.pre.tokenize_with_offsets.get_special_tokens_dict()
    assert {k: int(v) for k, v in again.items()} == {k: int(v) for k, v in special.items()}


def pieces_with_text(env, texts):
    """[[(token, input bytes of the piece)] per word] per text, from tokenize_with_offsets."""
    data = [t if isinstance(t, bytes) else t.encode() for t in texts]
    ids, starts, limits = env.pre.tokenize_with_offsets(tf.constant(data))
    assert ids.dtype == tf.int32 and starts.dtype == limits.dtype == tf.int64
    assert ids.ragged_rank == starts.ragged_rank == limits.ragged_rank == 2
    for t in (starts, limits):
        for a, b in zip(t.nested_row_splits, ids.nested_row_splits):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    # the same ids as tokenize
    assert ids.to_list() == env.pre.tokenize(tf.constant(data)).to_list()
    return [[[(VOCAB[i], d[s:e]) for i, s, e in zip(w, ws, we)]
             for w, ws, we in zip(row, rs, re_)]
            for d, row, rs, re_ in zip(data, ids.to_list(), starts.to_list(), limits.to_list())]


def test_tokenize_with_offsets_slices_each_piece_from_the_input(env):
    got = pieces_with_text(env, TEXTS + [BAD_UTF8])
    assert got[0] == [[("the", b"The")], [("quick", b"quick")], [("brown", b"brown")],
                      [("fox", b"fox")], [("jump", b"jump"), ("##s", b"s")], [("!", b"!")]]
    # é -> e spans both bytes of é; a combining accent is stripped and belongs to no piece
    assert got[1] == [[("caf", b"Caf"), ("##e", "é".encode())], [("caf", b"caf"), ("##e", b"e")],
                      [("na", b"na"), ("##ive", "ïve".encode())]]
    assert got[2] == []
    # CJK characters are words; NUL is deleted, joining x and y into one (unknown) word
    assert got[3] == [[("北", "北".encode())], [("京", "京".encode())],
                      [("un", b"un"), ("##want", b"want"), ("##ed", b"ed")],
                      [("[UNK]", b"x\x00y")]]
    # a word over 200 characters is one [UNK] spanning all of it
    assert got[4] == [[("run", b"RUN"), ("##ning", b"NING")], [("dog", b"dog")],
                      [("[UNK]", "😀".encode())], [("[UNK]", b"a" * 201)]]
    # capital sigma: σ, or ς at the end of a word (the original's lower-casing)
    assert got[5] == [[("σ", "Σ".encode()), ("##ς", "Σ".encode())], [(".", b".")]]
    assert got[6] == [[("fox", b"fox")], [("jump", b"jump"), ("##ed", b"ed")]]
    # every piece, whatever the text: a word's pieces are contiguous and its input text
    # tokenizes (FullTokenizer) to that piece, or to [UNK] for an unknown word
    for text, words in zip(TEXTS, got):
        for word in words:
            joined = b"".join(piece for _, piece in word).decode()
            assert env.tok.tokenize(joined) == [t for t, _ in word]
            assert joined in text


def test_preprocessor_exports_only_serving_safe_ops(env):
    ops = serving_ops.ops_in_saved_model(env.pre_dir)
    assert serving_ops.unsafe_ops(ops) == []
    assert {"UnicodeDecodeWithOffsets", "UnicodeEncode", "UpperBound"} <= ops


def test_export_savedmodel_command_with_mlm(env, tmp_path):
    """`bert-export-savedmodel --kind=encoder --with_mlm` from an original TF1 checkpoint:
    the checkpoint's masked-LM head answers `mlm`, the vocab and casing are assets."""
    from bert_tf.convert.tf1 import save_tf1_checkpoint
    from conftest import run_export_savedmodel  # run() in this process
    ckpt = save_tf1_checkpoint(env.model, str(tmp_path / "bert_model.ckpt"))
    config = str(tmp_path / "bert_config.json")
    env.model.encoder.bert_config.to_json_file(config)
    out = str(tmp_path / "enc_cli")
    assert run_export_savedmodel(
        ["--kind=encoder", "--with_mlm", f"--bert_config_file={config}",
         f"--init_checkpoint={ckpt}", f"--vocab_file={env.vocab}", "--do_lower_case=False",
         f"--export_dir={out}"]) == out
    enc = tf.saved_model.load(out)
    x = mlm_inputs(env)
    np.testing.assert_allclose(enc.mlm(x)["mlm_logits"].numpy(),
                               env.enc.mlm(x)["mlm_logits"].numpy(), atol=1e-5, rtol=0)
    assert not bool(enc.do_lower_case.numpy())
    with open(enc.vocab_file.asset_path.numpy(), encoding="utf-8") as f:
        assert f.read().split("\n")[:len(VOCAB)] == VOCAB
