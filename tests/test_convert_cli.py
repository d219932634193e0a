"""`python -m bert_tf.convert`: every --from/--to pair keeps the model's outputs (<= 1e-5, the
pre-training heads too where both formats hold them); tf1 -> hf -> tf1 is bit exact; bad input
gives one line and no output directory. Pairs with Model Garden, TF Hub or keras-hub files are
marked `peers` (their sources are made, and some outputs read, with the peers); the peers are
imported inside those tests, so the default suite needs none.
"""
import json
import os
import shutil
import subprocess
import sys

import bert_tf
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertError, tokenization
from bert_tf.convert import hf, interop, tf1
from bert_tf.convert.__main__ import convert
from bert_tf.modeling.config import BertConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_checkpoints import HEAD_NAMES, write_tf1_checkpoint  # noqa: E402
from test_model import random_tf1_weights, tiny_config  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(92)]
TEXTS = ["w1 W2 w33", "w4, w91!", ""]
ENCODER_KEYS = ("sequence_output", "pooled_output")
ALL_KEYS = ENCODER_KEYS + ("mlm_logits", "nsp_logits")
# One layer: the savedmodel exports trace the encoder (parity does not depend on depth).
ONE_LAYER = dict(num_hidden_layers=1)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("src")
    cfg = tiny_config(**ONE_LAYER)
    w = random_tf1_weights(cfg, np.random.default_rng(21))
    prefix = write_tf1_checkpoint(str(d / "bert_model.ckpt"), w)
    cfg.to_json_file(str(d / "bert_config.json"))
    (d / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return d, prefix, w


def inputs(seed=3, batch=3, seq=10):
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int32)
    mask[1, 6:] = 0
    mask[2, 2:] = 0
    return {"input_word_ids": rng.integers(0, len(VOCAB), (batch, seq)).astype(np.int32),
            "input_mask": mask,
            "input_type_ids": (np.arange(seq)[None] >= 4).astype(np.int32).repeat(batch, 0),
            "masked_lm_positions": np.array([[1, 2, 5]] * batch, np.int32)}


def outputs(net):
    """The model's outputs on `inputs()` as numpy: encoder outputs (+ heads of a pretrainer)."""
    x = inputs()
    if hasattr(net, "masked_lm"):
        out = net(x, training=False)
        enc = net.encoder({k: v for k, v in x.items() if k != "masked_lm_positions"},
                          training=False)
        out = dict(out, **{k: enc[k] for k in ENCODER_KEYS})
    else:
        out = net({k: v for k, v in x.items() if k != "masked_lm_positions"}, training=False)
    return {k: np.asarray(out[k]) for k in ALL_KEYS if k in out}


@pytest.fixture(scope="module")
def ref(source):
    """The source model (weights `w`) and its outputs."""
    _, _, w = source
    net = interop.set_weights(interop.build_bert_model(tiny_config(**ONE_LAYER), True), w)
    return net, outputs(net)


def assert_parity(got, want, keys):
    assert sorted(got) == sorted(keys)
    for key in keys:
        np.testing.assert_allclose(got[key], want[key], atol=1e-5, rtol=0, err_msg=key)
        assert np.abs(want[key]).max() > 0.1, key


@pytest.fixture(scope="module")
def sources(source, ref, tmp_path_factory):
    """The source model in each format bert_tf writes without a peer."""
    d, prefix, _ = source
    base = tmp_path_factory.mktemp("sources")
    native = tf.train.Checkpoint(model=ref[0]).write(str(base / "native" / "ckpt"))
    hf_dir = hf.save_hf_directory(ref[0], str(base / "hf"), str(d / "vocab.txt"), True)
    return {"tf1": prefix, "bert_tf": native, "hf": hf_dir}


def reload(to_format, out, model):
    """The converted model's outputs, read back from `out` (peer-free formats)."""
    heads = model == "pretrainer"
    if to_format == "tf1":
        cfg = BertConfig.from_json_file(os.path.join(out, "bert_config.json"))
        net = interop.build_bert_model(cfg, heads)
        assert not tf1.load_tf1_checkpoint(net, os.path.join(out, "bert_model.ckpt"))["missing"]
        return outputs(net)
    if to_format == "hf":
        net = interop.build_bert_model(hf.bert_config_from_hf(out), heads)
        assert not hf.load_hf_safetensors(net, out)["missing"]
        return outputs(net)
    assert to_format == "savedmodel" and not heads
    x = {k: tf.constant(v) for k, v in inputs().items() if k != "masked_lm_positions"}
    got = tf.saved_model.load(os.path.join(out, "encoder"))(x)
    return {k: got[k].numpy() for k in ENCODER_KEYS}


def check_preprocessor(out, vocab_file, lower=True, strip_accents=None):
    """Our preprocessor export beside the encoder gives FullTokenizer's ids, packed."""
    import tensorflow_text  # noqa: F401  (its ops)
    tok = tokenization.FullTokenizer(vocab_file, lower, strip_accents=strip_accents)
    got = tf.saved_model.load(os.path.join(out, "preprocessor"))(tf.constant(TEXTS))
    for text, row in zip(TEXTS, got["input_word_ids"].numpy()):
        ids = [2] + tok.convert_tokens_to_ids(tok.tokenize(text)) + [3]
        assert row.tolist() == ids + [0] * (len(row) - len(ids)), text


def served(want):
    """The reference as an export serves it: sequence outputs hold exactly 0.0 at padding."""
    return dict(want, sequence_output=want["sequence_output"] * inputs()["input_mask"][..., None])


# ---- peer-free pairs (default suite) --------------------------------------------------------

# slow: [savedmodel-hf] (the encoder + preprocessor pair from a source with a vocab; reading tf1
# is [tf1-tf1] / [hf-tf1], its vocab beside the checkpoint test_pretrained's [tf1-orig-True-orig])
PEER_FREE_PAIRS = [pytest.param(f, t, id=f"{t}-{f}", marks=[pytest.mark.slow] * (
    (f, t) == ("tf1", "savedmodel"))) for t in ("tf1", "hf", "savedmodel")
    for f in ("tf1", "bert_tf", "hf")]


@pytest.mark.parametrize("from_format,to_format", PEER_FREE_PAIRS)
def test_peer_free_pairs_keep_the_outputs(source, ref, sources, tmp_path, from_format,
                                          to_format):
    d = source[0]
    # The savedmodel preprocessor is exported once (it is the slow part): from hf, whose
    # directory carries the vocab.
    vocab = None if to_format == "savedmodel" else str(d / "vocab.txt")
    args = dict(bert_config_file=str(d / "bert_config.json")) if from_format != "hf" else {}
    out = convert(from_format, sources[from_format], to_format, str(tmp_path / "out"),
                  vocab_file=vocab, **args)
    model = "encoder" if to_format == "savedmodel" else "pretrainer"  # the default
    want = served(ref[1]) if to_format == "savedmodel" else ref[1]
    assert_parity(reload(to_format, out, model), want,
                  ENCODER_KEYS if model == "encoder" else ALL_KEYS)
    listing = sorted(os.listdir(out))
    if to_format == "savedmodel":
        # the source's vocab comes along (HF's; the release's vocab.txt beside bert_model.ckpt)
        assert listing == (["encoder", "preprocessor"] if from_format in ("hf", "tf1")
                           else ["encoder"])
        if from_format == "hf":
            check_preprocessor(out, str(d / "vocab.txt"))
            # The pair hands off: from_pretrained of the pair directory and of its encoder/
            # (vocab and casing from the sibling preprocessor) gives the source's text model
            # (was test_handoffs::test_convert_savedmodel_pair_loads, a second pair export).
            want = bert_tf.from_pretrained(sources["hf"], text_input=True, seq_length=16)(
                TEXTS)["pooled_output"].numpy()  # eager calls on a list
            for path in (out, os.path.join(out, "encoder")):
                got = bert_tf.from_pretrained(path, text_input=True, seq_length=16)
                np.testing.assert_allclose(got(TEXTS)["pooled_output"].numpy(), want,
                                           atol=1e-6, err_msg=path)
    elif to_format == "tf1":
        assert listing == ["bert_config.json", "bert_model.ckpt.data-00000-of-00001",
                           "bert_model.ckpt.index"] + (["vocab.txt"] if vocab else [])
    assert sorted(os.listdir(tmp_path)) == ["out"]  # nothing temporary left


def test_cli_tf1_to_hf_and_back_is_bit_exact(source, tmp_path):
    d, prefix, w = source
    proc = subprocess.run(
        [sys.executable, "-m", "bert_tf.convert", "--from=tf1", f"--source={prefix}",
         f"--bert_config_file={d / 'bert_config.json'}", f"--vocab_file={d / 'vocab.txt'}",
         "--to=hf", f"--output={tmp_path / 'hf'}", "--nodo_lower_case"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == [
        "BertForPreTraining"]
    tok_config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert tok_config["do_lower_case"] is False and tok_config["strip_accents"] is None
    assert hf.hf_casing(str(tmp_path / "hf")) == (False, False)
    # ... and back, with the HF directory's own config and vocab.
    out = convert("hf", str(tmp_path / "hf"), "tf1", str(tmp_path / "tf1"))
    assert sorted(os.listdir(out)) == ["bert_config.json", "bert_model.ckpt.data-00000-of-00001",
                                       "bert_model.ckpt.index", "vocab.txt"]
    reader = tf.train.load_checkpoint(os.path.join(out, "bert_model.ckpt"))
    assert sorted(reader.get_variable_to_shape_map()) == sorted(w)
    for name, value in w.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value, err_msg=name)
    assert (tmp_path / "tf1" / "vocab.txt").read_text() == (d / "vocab.txt").read_text()
    assert sorted(os.listdir(tmp_path)) == ["hf", "tf1"]  # nothing temporary left


def test_casing_travels_from_the_source(sources, tmp_path, capsys):
    # A HF directory that lower-cases but keeps accents (HF's strip_accents=false, keras-hub's
    # default): hf output keeps it, tf1 output (no casing file) says how to tokenize.
    src = str(tmp_path / "src")
    shutil.copytree(sources["hf"], src)
    path = os.path.join(src, "tokenizer_config.json")
    config = json.loads(open(path).read())
    with open(path, "w") as f:
        json.dump(dict(config, strip_accents=False), f)
    assert hf.hf_casing(src) == (True, False)
    out = convert("hf", src, "hf", str(tmp_path / "hf"))
    assert json.loads(open(os.path.join(out, "tokenizer_config.json")).read())[
        "strip_accents"] is False and hf.hf_casing(out) == (True, False)
    convert("hf", src, "tf1", str(tmp_path / "tf1"))
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "note: --to=tf1 records no casing, and this tokenizer's (lower-case True, strip "
        "accents False) is no --do_lower_case: tokenize with FullTokenizer(vocab, "
        "do_lower_case=True, strip_accents=False)")
    # --do_lower_case given wins; the tokenizer that casing names keeps accents
    out = convert("hf", src, "hf", str(tmp_path / "hf2"), do_lower_case=True)
    assert hf.hf_casing(out) == (True, True)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\ncafé\ncafe\nnaïve\nnaive\n,\n")
    tok = lambda lower, strip=None: tokenization.FullTokenizer(
        str(vocab), lower, strip_accents=strip).tokenize("Café, NAÏVE")
    assert tok(True, False) == ["café", ",", "naïve"]
    assert tok(True) == ["cafe", ",", "naive"]
    assert tok(False, True) == ["[UNK]", ",", "[UNK]"]  # Cafe, NAIVE
    # --to=savedmodel: the preprocessor tokenizes with the source's casing, and records it.
    import tensorflow_text  # noqa: F401  (its ops)
    sm_vocab = tmp_path / "sm_vocab.txt"  # as many tokens as the model's embeddings
    sm_vocab.write_text(vocab.read_text() + "".join(f"w{i}\n" for i in range(len(VOCAB) - 10)))
    out = convert("hf", src, "savedmodel", str(tmp_path / "sm"), vocab_file=str(sm_vocab))
    assert sorted(os.listdir(out)) == ["encoder", "preprocessor"]
    got = tf.saved_model.load(os.path.join(out, "preprocessor"))(tf.constant(["Café, NAÏVE"]))
    assert got["input_word_ids"].numpy()[0, :6].tolist() == [2, 5, 9, 7, 3, 0]
    meta = json.loads(open(os.path.join(out, "preprocessor", "assets.extra",
                                        "bert_tf_export.json")).read())
    assert (meta["do_lower_case"], meta["strip_accents"]) == (True, False)


def test_entry_point_main_errors_in_one_line(source, tmp_path):
    d, prefix, _ = source
    # main() with no arguments, as the `bert-convert` console script calls it
    code = "from bert_tf.convert.__main__ import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "--from=tf1", f"--source={prefix}", "--to=savedmodel",
         f"--bert_config_file={d / 'bert_config.json'}", "--model=pretrainer",
         f"--output={tmp_path / 'out'}"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: --model=pretrainer: --to=savedmodel holds the encoder only; pass "
        "--model=encoder")
    assert "Traceback" not in proc.stderr and not os.listdir(tmp_path)


def test_cli_errors_are_one_line_and_write_nothing(source, sources, tmp_path, monkeypatch):
    d, prefix, w = source
    enc_prefix = write_tf1_checkpoint(str(tmp_path / "enc" / "bert_model.ckpt"),
                                      {k: v for k, v in w.items() if k not in HEAD_NAMES})
    common = dict(bert_config_file=str(d / "bert_config.json"), vocab_file=str(d / "vocab.txt"))
    out = str(tmp_path / "out")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00not json")
    (tmp_path / "broken" / "config.json").write_text((d / "bert_config.json").read_text())
    no_vocab = str(tmp_path / "hf_no_vocab")
    shutil.copytree(sources["hf"], no_vocab)
    os.remove(os.path.join(no_vocab, "vocab.txt"))
    cases = [
        (("tf1", enc_prefix, "hf", out), dict(common, model="pretrainer"),
         "pass --model=encoder"),
        (("onnx", prefix, "hf", out), common, "--from: unknown format 'onnx'"),
        (("tf1", prefix, "savedmodel2", out), common, "--to: unknown format 'savedmodel2'"),
        (("tf1", enc_prefix, "tf1", out), dict(common, bert_config_file=None),
         "pass --bert_config_file"),
        (("tf1", enc_prefix, "hf", out), dict(common, vocab_file=None, model="encoder"),
             "--vocab_file: required"),
        (("tf1", enc_prefix, "keras_hub", out), dict(common, vocab_file=None),
         "--vocab_file: required for --to=keras_hub"),
        (("hf", no_vocab, "hf", out), {}, "--vocab_file: required for --to=hf"),
        (("tf1", prefix, "hf", out), dict(common, bert_config_file=str(
            tmp_path / "cfg.json")), "bert_config file not found"),
        (("hf", str(tmp_path / "broken"), "tf1", out), {}, "not a readable safetensors file"),
        (("keras_hub", str(tmp_path), "tf1", out), dict(model="pretrainer"),
         "--from=keras_hub holds no pre-training heads (encoder only); pass --model=encoder"),
        (("tf1", prefix, "keras_hub", out), dict(common, model="pretrainer"),
         "--to=keras_hub holds the encoder only"),
        (("model_garden", prefix, "tf1", out), {}, "holds a tf1 model, not --from=model_garden"),
        (("tfhub", str(tmp_path / "broken"), "tf1", out), {}, "holds a hf model, not --from=tfhub"),
    ]
    for args, kwargs, needle in cases:
        with pytest.raises(BertError) as err:
            convert(*args, **kwargs)
        assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)
        assert not os.path.exists(out)
    # A failure after part of the output is written (the checkpoint, then the config fails)
    # leaves nothing.
    def fail(*args, **kwargs):
        raise BertError("bert_config.json: simulated failure")
    with monkeypatch.context() as m:
        m.setattr(BertConfig, "to_json_file", fail)
        with pytest.raises(BertError, match="^bert_config.json: simulated failure$"):
            convert("tf1", prefix, "tf1", out, **common)
    assert sorted(os.listdir(tmp_path)) == ["broken", "enc", "hf_no_vocab"]
    # The encoder alone converts; an existing output is never replaced by accident.
    convert("tf1", enc_prefix, "tf1", out, model="encoder", **common)
    with pytest.raises(BertError, match="already exists"):
        convert("tf1", enc_prefix, "tf1", out, model="encoder", **common)
    assert sorted(dict(tf.train.list_variables(os.path.join(out, "bert_model.ckpt")))) == sorted(
        k for k in w if k not in HEAD_NAMES)
    convert("tf1", prefix, "tf1", out, overwrite=True, **common)  # --overwrite swaps it
    assert sorted(dict(tf.train.list_variables(os.path.join(out, "bert_model.ckpt")))) == sorted(w)


# ---- pairs with Model Garden, TF Hub and keras-hub files (`make test-peers`) ---------------

@pytest.fixture(scope="module")
def peer_sources(source, ref, tmp_path_factory):
    """The source model as a Model Garden checkpoint (heads included), a TF Hub encoder (+ mlm)
    exported by Model Garden's export_tfhub_lib, and a keras-hub preset whose tokenizer is
    keras-hub's `BertTokenizer(lowercase=True)` (lower-cases, keeps accents)."""
    import keras_hub
    from official.legacy.bert import configs as mg_configs
    from official.nlp.tools import export_tfhub_lib
    from bert_tf.convert import keras_hub as khc
    from bert_tf.convert import model_garden as mgc
    d = source[0]
    base = tmp_path_factory.mktemp("peer_sources")
    mg = mgc.save_model_garden_checkpoint(ref[0], str(base / "mg" / "bert_model.ckpt"))
    items = dict(mgc.to_model_garden(ref[0])[0])
    del items["_pretrainer"]
    items_ckpt = tf.train.Checkpoint(**items).save(str(base / "items" / "ckpt"))
    hub_dir = str(base / "tfhub")
    export_tfhub_lib.export_model(
        hub_dir, bert_config=mg_configs.BertConfig(**tiny_config(**ONE_LAYER).to_dict()),
        model_checkpoint_path=items_ckpt, with_mlm=True, vocab_file=str(d / "vocab.txt"),
        do_lower_case=False)
    preset = str(base / "preset")
    khc.to_keras_hub_backbone(ref[0]).save_to_preset(preset)
    keras_hub.models.BertTokenizer(vocabulary=VOCAB, lowercase=True).save_to_preset(preset)
    return {"model_garden": mg, "tfhub": hub_dir, "keras_hub": preset}


def reload_with_peers(to_format, out, model):
    """Outputs of the converted model, read by the peer itself where it can (encoder) and by
    our reader for the heads."""
    import keras
    if to_format == "keras_hub":
        import keras_hub
        backbone = keras_hub.models.BertBackbone.from_preset(out)
        x = inputs()
        got = backbone({"token_ids": x["input_word_ids"], "padding_mask": x["input_mask"],
                        "segment_ids": x["input_type_ids"]}, training=False)
        return {k: keras.ops.convert_to_numpy(got[k]) for k in ENCODER_KEYS}
    if to_format != "model_garden":
        return reload(to_format, out, model)
    from bert_tf.convert import model_garden as mgc
    prefix = os.path.join(out, "bert_model.ckpt")
    cfg = BertConfig.from_json_file(os.path.join(out, "bert_config.json"))
    theirs = mgc.model_garden_encoder(cfg)
    status = tf.train.Checkpoint(encoder=theirs).read(prefix).expect_partial()
    status.assert_existing_objects_matched()
    x = {k: v for k, v in inputs().items() if k != "masked_lm_positions"}
    got = theirs(x, training=False)
    enc = {k: np.asarray(got[k]) for k in ENCODER_KEYS}
    ours = outputs(mgc.load_model_garden_checkpoint(prefix, bert_config=cfg))
    assert_parity({k: ours[k] for k in ENCODER_KEYS}, enc, ENCODER_KEYS)
    return ours if model == "pretrainer" else enc


PEER_PAIRS = ([(f, t) for f in ("tf1", "bert_tf", "hf") for t in ("model_garden", "keras_hub")]
              + [(f, t) for f in ("model_garden", "tfhub", "keras_hub")
                 for t in ("tf1", "hf", "model_garden", "keras_hub", "savedmodel")])


@pytest.mark.peers
@pytest.mark.parametrize("from_format,to_format", PEER_PAIRS)
def test_peer_pairs_keep_the_outputs(source, ref, sources, peer_sources, tmp_path, from_format,
                                     to_format, capsys):
    d = source[0]
    src = {**sources, **peer_sources}[from_format]
    args = dict(bert_config_file=str(d / "bert_config.json")) if from_format in (
        "tf1", "bert_tf") else {}
    if from_format in ("tf1", "bert_tf", "model_garden"):
        args["vocab_file"] = str(d / "vocab.txt")
    out = convert(from_format, src, to_format, str(tmp_path / "out"), **args)
    model = ("pretrainer" if from_format != "keras_hub"
             and to_format in ("tf1", "hf", "model_garden") else "encoder")
    keys = ALL_KEYS if model == "pretrainer" else ENCODER_KEYS
    if from_format == "tfhub" and model == "pretrainer":
        keys = ENCODER_KEYS + ("mlm_logits",)  # TF Hub exports carry no NSP head
        assert "has no next-sentence head" in capsys.readouterr().err
    got = reload_with_peers(to_format, out, model)
    want = served(ref[1]) if to_format == "savedmodel" else ref[1]
    assert_parity({k: got[k] for k in keys}, want, keys)
    assert sorted(os.listdir(tmp_path)) == ["out"]
    # The source's casing travels: keras-hub's BertTokenizer(lowercase=True) keeps accents,
    # the TF Hub export was made cased, the others follow --do_lower_case (default True).
    casing = {"keras_hub": (True, False), "tfhub": (False, False)}.get(from_format,
                                                                      (True, True))
    if to_format in ("tf1", "model_garden") and casing[0] != casing[1]:
        assert "FullTokenizer(vocab, do_lower_case=True, strip_accents=False)" in (
            capsys.readouterr().err)
    if to_format == "hf":
        assert hf.hf_casing(out) == casing
    if to_format == "keras_hub":
        from bert_tf.convert import keras_hub as khc
        assert khc.keras_hub_casing(out) == casing
    if to_format == "savedmodel":  # the preprocessor tokenizes with the source's casing
        assert sorted(os.listdir(out)) == ["encoder", "preprocessor"]
        check_preprocessor(out, str(d / "vocab.txt"), casing[0], strip_accents=casing[1])
