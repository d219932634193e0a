"""from_pretrained / load_checkpoint on checkpoints the peers write themselves: Model Garden's
BertEncoder and BertPretrainerV2 checkpoints, a TF Hub SavedModel from Model Garden's
export_tfhub_lib, a keras-hub preset saved by keras-hub; each matches the format's converter
(bert_tf.convert.{model_garden,tfhub,keras_hub}) within 1e-5.

Marked `peers`: a missing peer fails every test (never skips).
"""
import os

import numpy as np
import pytest

import bert_tf
import keras
import tensorflow as tf
try:
    import keras_hub
    import tf_keras
    from official.legacy.bert import configs as mg_configs
    from official.nlp.modeling import models as mg_models
    from official.nlp.modeling import networks
    from official.nlp.tools import export_tfhub_lib
    PEER_ERROR = None
except ImportError as e:  # conftest fails every test of this module (never skips)
    PEER_ERROR = e

from bert_tf.convert import checkpoints, keras_hub as khc, model_garden as mgc, tfhub
from bert_tf.modeling import models as bm
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.pretrained import read_pretrained

pytestmark = pytest.mark.peers

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "good", "bad", "movie", "film",
         "a", "was", "very", "not", "it", "##s", ".", ",", "cafe", "paris"]
CFG = dict(vocab_size=len(VOCAB), hidden_size=16, num_layers=2, num_attention_heads=4,
           intermediate_size=24, max_sequence_length=32, type_vocab_size=2)


def randomize(variables, seed):
    rng = np.random.default_rng(seed)
    for v in variables:
        v.assign(rng.normal(0.0, 0.3, v.shape).astype(np.float32)
                 + (1.0 if "gamma" in v.name else 0.0))


def ids_batch():
    rng = np.random.default_rng(3)
    ids = rng.integers(0, len(VOCAB), (3, 9)).astype(np.int32)
    mask = np.ones((3, 9), np.int32)
    mask[2, 4:] = 0
    types = np.zeros((3, 9), np.int32)
    types[:, 5:] = 1
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def assert_same(got, want, keys=("sequence_output", "pooled_output")):
    for key in keys:
        a, b = np.asarray(got[key]), np.asarray(want[key])
        np.testing.assert_allclose(a, b, atol=1e-5, err_msg=key)
        assert np.abs(b).max() > 0.1  # random weights, not a degenerate check


def write_vocab(directory):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")
    return path


def test_model_garden_encoder_checkpoint(tmp_path):
    mg = networks.BertEncoder(**CFG, dict_outputs=True)
    x = ids_batch()
    mg(x)  # builds it
    randomize(mg.weights, 0)
    want_mg = {k: v.numpy() for k, v in mg(x, training=False).items() if k != "encoder_outputs"}
    # Model Garden's own writer: a released TF2 BERT checkpoint's layout.
    directory = str(tmp_path / "uncased_mg")
    tf.train.Checkpoint(encoder=mg).save(os.path.join(directory, "bert_model.ckpt"))
    write_vocab(directory)
    ref = mgc.load_model_garden_checkpoint(directory)
    want = ref(x, training=False)
    assert_same(want, want_mg)
    # load_checkpoint (so every script's --init_checkpoint) accepts it ...
    enc = BertEncoder.from_bert_config(ref.bert_config)
    report = checkpoints.load_checkpoint(enc, directory)
    assert report["missing"] == [] and report["skipped"] == []
    assert_same(enc(x, training=False), want)
    clf = bm.BertClassifier.from_bert_config(ref.bert_config, 2)
    assert checkpoints.load_checkpoint(clf, directory)["missing"] == ["output_bias",
                                                                      "output_weights"]
    # ... and so does from_pretrained, with the config from the shapes, vocab and casing.
    info = read_pretrained(directory)
    assert info.detected.format == "model_garden" and info.bert_config == ref.bert_config
    assert info.vocab_file == os.path.join(directory, "vocab.txt") and info.do_lower_case
    assert_same(bert_tf.from_pretrained(directory)(x, training=False), want)
    # A params.yaml gives what shapes do not say (activation, dropout).
    with open(os.path.join(directory, "params.yaml"), "w") as f:
        f.write("task:\n  model:\n    encoder:\n      type: bert\n      bert:\n"
                "        hidden_activation: gelu\n        dropout_rate: 0.0\n"
                "        attention_dropout_rate: 0.05\n        hidden_size: 16\n")
    cfg = read_pretrained(directory).bert_config
    assert (cfg.hidden_act, cfg.hidden_dropout_prob, cfg.attention_probs_dropout_prob,
            cfg.num_attention_heads) == ("gelu", 0.0, 0.05, 4)  # the rest from the shapes
    text = bert_tf.from_pretrained(directory, text_input=True, seq_length=8)
    assert text.preprocessor.vocabulary == VOCAB


def test_model_garden_pretrainer_v2_checkpoint(tmp_path):
    enc = networks.BertEncoder(**CFG, dict_outputs=True)
    pt = mg_models.BertPretrainerV2(
        encoder_network=enc, mlm_activation=lambda t: tf_keras.activations.gelu(
            t, approximate=True))
    x = ids_batch()
    positions = np.array([[1, 2], [0, 4], [3, 1]], np.int32)
    pt(dict(x, masked_lm_positions=positions))
    randomize(pt.weights, 1)
    prefix = tf.train.Checkpoint(**pt.checkpoint_items).save(str(tmp_path / "pt" / "ckpt"))
    ref = mgc.load_model_garden_checkpoint(prefix)
    assert type(ref) is bm.BertPretrainer
    want = ref(dict(x, masked_lm_positions=positions), training=False)
    got = bert_tf.from_pretrained(prefix, task="pretraining")
    out = got(dict(x, masked_lm_positions=positions), training=False)
    assert_same(out, want, ("sequence_output", "pooled_output", "mlm_logits"))
    theirs = pt(dict(x, masked_lm_positions=positions), training=False)["mlm_logits"]
    np.testing.assert_allclose(np.asarray(out["mlm_logits"]), theirs.numpy(), atol=1e-5)
    fresh = bm.BertPretrainer.from_bert_config(ref.bert_config)
    assert checkpoints.load_checkpoint(fresh, str(tmp_path / "pt"))["missing"] == [
        "cls/seq_relationship/output_bias", "cls/seq_relationship/output_weights"]


def test_tfhub_savedmodel_from_export_tfhub_lib(tmp_path):
    vocab = write_vocab(str(tmp_path))
    cfg = mg_configs.BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2,
                                num_attention_heads=4, intermediate_size=24,
                                max_position_embeddings=32, type_vocab_size=2)
    encoder = export_tfhub_lib.get_bert_encoder(cfg)
    x = ids_batch()
    encoder(x)
    randomize(encoder.weights, 2)
    ckpt = tf.train.Checkpoint(encoder=encoder).save(str(tmp_path / "mg" / "ckpt"))
    hub_dir = str(tmp_path / "bert_en_cased_L-2_H-16_A-4" / "1")
    export_tfhub_lib.export_model(hub_dir, bert_config=cfg, model_checkpoint_path=ckpt,
                                  with_mlm=False, vocab_file=vocab, do_lower_case=False)
    ref, ref_vocab, ref_lower = tfhub.load_tfhub_encoder(hub_dir)
    want = ref(x, training=False)
    assert_same(want, {k: v.numpy() for k, v in tf.saved_model.load(hub_dir)(
        x, training=False).items() if k != "encoder_outputs"})
    info = read_pretrained(hub_dir)
    assert info.detected.format == "tfhub" and info.bert_config == ref.bert_config
    assert (info.vocab_file, info.do_lower_case, ref_lower) == (ref_vocab, False, False)
    assert_same(bert_tf.from_pretrained(hub_dir)(x, training=False), want)
    clf = bm.BertClassifier.from_bert_config(ref.bert_config, 2)
    checkpoints.load_checkpoint(clf, hub_dir)
    assert_same(clf.encoder(x, training=False), want)


def test_keras_hub_preset_saved_by_keras_hub(tmp_path):
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(VOCAB), num_layers=2, num_heads=4, hidden_dim=16,
        intermediate_dim=24, max_sequence_length=32, num_segments=2)
    randomize(backbone.weights, 4)
    preset = str(tmp_path / "preset")
    backbone.save_to_preset(preset)
    keras_hub.models.BertTokenizer(vocabulary=VOCAB, lowercase=True,
                                   strip_accents=True).save_to_preset(preset)
    x = ids_batch()
    theirs = backbone({"token_ids": x["input_word_ids"], "padding_mask": x["input_mask"],
                       "segment_ids": x["input_type_ids"]})
    ref, ref_vocab, ref_lower = khc.load_keras_hub_preset(preset)
    want = ref(x, training=False)
    assert_same(want, {"sequence_output": keras.ops.convert_to_numpy(theirs["sequence_output"]),
                       "pooled_output": keras.ops.convert_to_numpy(theirs["pooled_output"])})
    info = read_pretrained(preset)
    assert info.detected.format == "keras_hub" and info.bert_config == ref.bert_config
    assert (info.vocab_file, info.do_lower_case, info.strip_accents) == (ref_vocab, True, True)
    assert_same(bert_tf.from_pretrained(preset)(x, training=False), want)
    tagger = bert_tf.from_pretrained(preset, task="tagging", num_classes=3, text_input=True,
                                     seq_length=10)
    ids = tagger.preprocessor(tf.constant(["Café PARIS"]))["input_word_ids"].numpy()
    assert ids.tolist() == [[2, 18, 19, 3] + [0] * 6]  # lower-cased, accents stripped
    enc = BertEncoder.from_bert_config(ref.bert_config)
    checkpoints.load_checkpoint(enc, preset)
    assert_same(enc(x, training=False), want)
    # keras-hub's default uncased tokenizer keeps accents, and so does the text model
    # (café is no vocab word); do_lower_case given wins.
    keras_hub.models.BertTokenizer(vocabulary=VOCAB, lowercase=True).save_to_preset(preset)
    kept = bert_tf.from_pretrained(preset, text_input=True, seq_length=10)
    ids = kept.preprocessor(tf.constant(["Café PARIS"]))["input_word_ids"].numpy()
    assert ids.tolist() == [[2, 1, 19, 3] + [0] * 6]
    assert bert_tf.from_pretrained(preset, text_input=True, seq_length=10,
                                   do_lower_case=False).preprocessor.do_lower_case is False


ACCENT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "café", "crème", "brûlée",
                "ångström", "naïve", "résumé", "cafe", "creme", "##s", ",", ".", "le", "à",
                "zoë", "kraków", "中", "文", "über", "la", "resume"]
ACCENT_LINES = ["Café crème brûlée", "Ångström naïve résumé", "Zoë à KRAKÓW, über le café.",
                "CAFÉS 中文 la Crème", "Resume RÉSUMÉ cafe"]


def test_keras_hub_lowercase_tokenizer_keeps_accents_in_text_input(tmp_path):
    """A preset with keras-hub's `BertTokenizer(lowercase=True)` (strip_accents=False): the
    text model tokenizes like keras-hub and gives its backbone's outputs."""
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(ACCENT_VOCAB), num_layers=2, num_heads=4, hidden_dim=16,
        intermediate_dim=24, max_sequence_length=32, num_segments=2)
    randomize(backbone.weights, 5)
    preset = str(tmp_path / "preset")
    backbone.save_to_preset(preset)
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=ACCENT_VOCAB, lowercase=True)
    tokenizer.save_to_preset(preset)
    assert khc.keras_hub_casing(preset) == (True, False)
    model = bert_tf.from_pretrained(preset, text_input=True, seq_length=16)
    assert (model.preprocessor.do_lower_case, model.preprocessor.strip_accents) == (True, False)
    theirs = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=16)(
        tf.constant(ACCENT_LINES))
    ours = model.preprocessor(tf.constant(ACCENT_LINES))
    want_ids = keras.ops.convert_to_numpy(theirs["token_ids"]).tolist()
    assert ours["input_word_ids"].numpy().tolist() == want_ids
    assert ours["input_mask"].numpy().tolist() == keras.ops.convert_to_numpy(
        theirs["padding_mask"]).astype(int).tolist()
    assert ours["input_type_ids"].numpy().tolist() == keras.ops.convert_to_numpy(
        theirs["segment_ids"]).tolist()
    pieces = tokenizer(tf.constant(ACCENT_LINES))  # a list of lists (keras-hub converts)
    assert pieces == [[5, 6, 7], [8, 9, 10], [18, 17, 19, 14, 22, 16, 5, 15],
                      [5, 13, 20, 21, 23, 6], [24, 10, 11]]  # accents kept: café, not cafe
    assert [row[1:1 + len(p)] for row, p in zip(want_ids, pieces)] == pieces
    want = backbone(theirs)
    assert_same(model(tf.constant(ACCENT_LINES)), {
        k: keras.ops.convert_to_numpy(want[k]) for k in ("sequence_output", "pooled_output")})
