"""Reading a model runs none of its code (issue 44).

SavedModels a user hands in are read as data (`bert_tf.convert.saved_model_data`): a
SavedModel carrying a resource whose initializer writes a marker file (alone, added to a TF
Hub-style encoder, to our own encoder export, in the TF Serving layout) is read by
from_pretrained, bert-convert, --init_checkpoint and bert-export-savedmodel with the clean
source's weights, or refused in one line, and the marker never appears; `tf.saved_model.load`
on the same folders does write it (the test can fail); bad sources get one line each. The
rest of the audit (HF pickles, paths in metadata, casing data, the import check):
tests/test_untrusted_paths.py.
"""
import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import bert_tf
from bert_tf import BertError
from bert_tf.convert import formats, handoff
from bert_tf.convert.__main__ import convert
from conftest import run_export_savedmodel
from test_convert_encoder_only import write_bert_model_dir
from test_readers import _hub_names, assert_same, weights_of, write_hub_encoder

VARIANTS = ["alone", "hub", "served", "ours"]
TEXTS = ["the movie was good", "a dull film"]


class Payload(tf.saved_model.experimental.TrackableResource):
    """A resource whose initializer writes `marker`: run when the SavedModel is loaded."""

    def __init__(self, marker):
        self._marker = marker
        super().__init__()

    def _create_resource(self):
        return tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name="payload")

    def _initialize(self):
        tf.io.write_file(self._marker, "code from the model ran")
        tf.raw_ops.AssignVariableOp(resource=self.resource_handle, value=1.0)


def add_payload(clean_dir, out_dir, marker):
    """`clean_dir` re-saved at `out_dir` with the payload (and its assets.extra, if any)."""
    loaded = tf.saved_model.load(str(clean_dir))  # our own clean SavedModel: safe to run
    loaded.payload = Payload(str(marker))
    tf.saved_model.save(loaded, str(out_dir))
    if os.path.isdir(os.path.join(clean_dir, "assets.extra")):
        shutil.copytree(os.path.join(clean_dir, "assets.extra"),
                        os.path.join(out_dir, "assets.extra"))


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    base = tmp_path_factory.mktemp("untrusted")
    hf_dir = write_bert_model_dir(base)
    vocab = os.path.join(hf_dir, "vocab.txt")
    encoder = bert_tf.from_pretrained(hf_dir)
    clean_hub = base / "clean_hub"
    write_hub_encoder(clean_hub, encoder, vocab)
    clean_ours = str(base / "clean_ours")
    bert_tf.exporter("encoder")(encoder, clean_ours, vocab_file=vocab, do_lower_case=True)
    markers = {v: str(base / f"marker_{v}.txt") for v in VARIANTS}
    root = tf.Module()
    root.payload = Payload(markers["alone"])
    tf.saved_model.save(root, str(base / "alone"))
    add_payload(clean_hub, base / "hub", markers["hub"])
    add_payload(clean_hub, base / "served" / "1", markers["served"])  # TF Serving layout
    add_payload(clean_ours, base / "ours" / "1", markers["ours"])
    paths = {v: str(base / v) for v in VARIANTS}
    assert not any(os.path.exists(m) for m in markers.values())  # saving ran nothing
    return dict(base=base, hf=hf_dir, vocab=vocab, encoder=encoder, want=weights_of(encoder),
                markers=markers, paths=paths, clean_hub=str(clean_hub), clean_ours=clean_ours)


@pytest.fixture(autouse=True)
def no_marker_after(request):
    yield
    if "src" in request.fixturenames:
        markers = request.getfixturevalue("src")["markers"]
        assert [m for m in markers.values() if os.path.exists(m)] == []


def one_line(e, *parts):
    msg = str(e.value)
    assert "\n" not in msg, msg
    for p in parts:
        assert p in msg, msg
    return msg


def test_loading_as_a_program_writes_the_marker(src):
    """What the other tests would catch: tf.saved_model.load runs the payload."""
    for variant in VARIANTS:
        marker = src["markers"][variant]
        inner = formats.source.saved_model_inside(src["paths"][variant])
        tf.saved_model.load(inner)
        assert open(marker).read() == "code from the model ran", variant
        os.remove(marker)


@pytest.mark.parametrize("variant", VARIANTS)
def test_from_pretrained_and_convert_read_as_data(src, variant, tmp_path):
    path = src["paths"][variant]
    if variant == "alone":
        with pytest.raises(BertError) as e:
            bert_tf.from_pretrained(path)
        one_line(e, path, "no BERT encoder variables")
        for from_format in ("auto", "tfhub"):
            with pytest.raises(BertError) as e:
                convert(from_format, path, "hf", str(tmp_path / from_format))
            one_line(e, "no BERT encoder variables")
            assert not os.path.exists(tmp_path / from_format)
        return
    got = bert_tf.from_pretrained(path)
    assert_same(weights_of(got), src["want"])
    fmt, _ = formats.detect(path)
    assert fmt.name == ("bert_tf_export" if variant == "ours" else "tfhub")
    read = formats.read(path)
    assert read.vocab_file.endswith("vocab.txt") and read.do_lower_case is True
    assert os.path.dirname(read.vocab_file).startswith(path)
    for from_format in ("auto", "tfhub"):
        out = str(tmp_path / from_format)
        convert(from_format, path, "hf", out)
        assert_same(weights_of(bert_tf.from_pretrained(out)), src["want"])


def test_load_as_keras_model_reads_as_data(src):
    model, meta = bert_tf.export.load_as_keras_model(os.path.join(src["paths"]["ours"], "1"))
    assert meta["kind"] == "encoder"
    assert_same(weights_of(model), src["want"])


def write_hub_with_mlm(export_dir, encoder, vocab_file, mlm, do_lower_case=True,
                       marker=None):
    """A TF Hub encoder as Model Garden's export_tfhub_lib writes one with_mlm=True: `variables`
    (the encoder's), an `mlm` child whose `variables` holds the encoder's plus the
    cls/predictions ones (`mlm`: {name: array}), and, with `marker`, the payload."""
    heads = encoder.bert_config.num_attention_heads
    root = tf.Module()
    root.hub_variables = [tf.Variable(v, name=n) for n, v in
                          _hub_names(bert_tf.convert.interop.get_weights(encoder),
                                     heads).items()]
    if mlm:
        root.mlm = tf.Module()
        root.mlm.head = [tf.Variable(v, name=n) for n, v in mlm.items()]
    root.vocab_file = tf.saved_model.Asset(vocab_file)
    root.do_lower_case = tf.Variable(do_lower_case, trainable=False)
    tf.saved_model.save(root, str(export_dir))
    loaded = tf.saved_model.load(str(export_dir))  # our own clean SavedModel: safe to run
    loaded.variables = list(loaded.hub_variables)
    if mlm:
        loaded.mlm.variables = list(loaded.hub_variables) + list(loaded.mlm.head)
    if marker is not None:
        loaded.payload = Payload(str(marker))
    tf.saved_model.save(loaded, str(export_dir))


def test_tfhub_encoder_with_mlm_is_read_as_data(src, tmp_path):
    """The `mlm` child's variables (export_tfhub_lib's with_mlm=True), payload attached."""
    cfg = src["encoder"].bert_config
    h, rng = cfg.hidden_size, np.random.default_rng(1)
    mlm = {f"cls/predictions/transform/dense/{k}": rng.normal(size=s).astype(np.float32)
           for k, s in (("kernel", (h, h)), ("bias", (h,)))}
    mlm.update({f"cls/predictions/transform/LayerNorm/{k}": rng.normal(size=h).astype(
        np.float32) for k in ("gamma", "beta")})
    mlm["cls/predictions/output_bias/bias"] = rng.normal(size=cfg.vocab_size).astype(
        np.float32)
    path, marker = str(tmp_path / "mlm"), tmp_path / "marker.txt"
    write_hub_with_mlm(path, src["encoder"], src["vocab"], mlm, marker=marker)
    read = formats.read(path)
    assert read.format == "tfhub" and read.has_mlm()
    model = bert_tf.from_pretrained(path, task="pretraining")
    got = weights_of(model)
    want = {**src["want"], **{k.replace("output_bias/bias", "output_bias"): v
                              for k, v in mlm.items()}}
    assert_same({k: got[k] for k in want}, want)
    assert not marker.exists()
    tf.saved_model.load(path)  # the payload is live: loading it as a program runs it
    assert marker.read_text() == "code from the model ran"


def test_do_lower_case_variable_must_be_a_bool_scalar(src, tmp_path):
    path = str(tmp_path / "bad_lower")
    write_hub_with_mlm(path, src["encoder"], src["vocab"], {}, do_lower_case=[True, False])
    # (no mlm child: the encoder's variables and a do_lower_case of the wrong shape)
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(path)
    one_line(e, path, "do_lower_case variable is a bool of shape [2], not a bool scalar")


def test_asset_links_cannot_leave_the_savedmodel(src, tmp_path):
    d = _copy(src["paths"]["hub"], tmp_path / "hub")
    (tmp_path / "secret.txt").write_text(open(src["vocab"]).read())
    vocab = os.path.join(d, "assets", "vocab.txt")
    os.remove(vocab)
    os.symlink(tmp_path / "secret.txt", vocab)
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(d)
    one_line(e, "'vocab.txt' is a link to", "refusing to read outside")


@pytest.mark.slow  # two preprocessor exports, each saved twice (casing without metadata:
# tests/test_untrusted_paths.py covers it in the default suite on tiny graphs)
def test_preprocessor_casing_is_read_as_data(src, tmp_path):
    from bert_tf.convert import tfhub
    import tensorflow_text  # noqa: F401  (the preprocessor's ops, for the clean re-save)
    for lower in (True, False):
        clean, marker = str(tmp_path / f"pre_{lower}"), tmp_path / f"marker_{lower}.txt"
        bert_tf.export.export_preprocessor(src["vocab"], lower, clean, seq_length=16)
        add_payload(clean, tmp_path / f"payload_{lower}", marker)
        shutil.rmtree(tmp_path / f"payload_{lower}" / "assets.extra")  # a TF Hub one: no metadata
        vocab, got = tfhub.read_tfhub_preprocessor(str(tmp_path / f"payload_{lower}"))
        assert got is lower and open(vocab).read() == open(src["vocab"]).read()
        assert not marker.exists()


def _task(command, options, bert_config):
    if command == "run_classifier":
        from bert_tf.tasks.classifier import ClassifierTask
        return ClassifierTask(options, bert_config, ["0", "1"])
    if command == "run_ner":
        from bert_tf.tasks.ner import NerTask
        return NerTask(options, bert_config, ["O", "B-PER", "I-PER"])
    from bert_tf.tasks.squad import SquadTask
    return SquadTask(options, bert_config)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("command", ["run_classifier", "run_ner", "run_squad",
                                     "run_pretraining"])
def test_init_checkpoint_of_training_commands(src, variant, command, tmp_path):
    """What each command does with --init_checkpoint before training: the hand-off
    (`tasks.cli.with_handoff`, run_pretraining's app_main), its task model, the trainer's
    restore."""
    from bert_tf.modeling.models import find_encoder
    from bert_tf.tasks import classifier, finetune, ner, squad
    from bert_tf.pretraining.options import PretrainingOptions
    config_cls = {"run_classifier": classifier.ClassifierConfig, "run_ner": ner.NerConfig,
                  "run_squad": squad.SquadConfig,
                  "run_pretraining": PretrainingOptions}[command]
    path = src["paths"][variant]
    options = config_cls(init_checkpoint=path, output_dir=str(tmp_path / "out"),
                         max_seq_length=16)
    if variant == "alone":
        with pytest.raises(BertError) as e:
            handoff.hand_off(options, set())
        assert one_line(e, "no BERT encoder variables").startswith(
            f"--init_checkpoint={path}: ")
        return
    options, read = handoff.hand_off(options, set())
    assert options.vocab_file == read.vocab_file and options.do_lower_case is True
    if command == "run_pretraining":
        from bert_tf.pretraining import pretraining
        trainer = pretraining.make_trainer(handoff.bert_config(options, read), options,
                                           init_source=read)
    else:
        trainer = finetune.make_trainer(_task(command, options, handoff.bert_config(
            options, read)), options, read)
    assert trainer.restore() == "initialized"
    assert_same(weights_of(find_encoder(trainer.model)), src["want"])


def test_extract_features(src, tmp_path):
    from bert_tf.tasks import cli, features
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")

    def run(path, name):
        cfg = features.FeatureConfig(init_checkpoint=path, input_file=str(tmp_path / "in.txt"),
                                     output_file=str(tmp_path / f"{name}.jsonl"), layers="-1",
                                     max_seq_length=16)
        cli.with_handoff(features.run)(cfg)
        return [json.loads(line) for line in open(tmp_path / f"{name}.jsonl")]
    # TF Hub exports record no hidden_act (read as "gelu"), ours records gelu_exact
    want = {"hub": run(src["clean_hub"], "clean_hub"), "ours": run(src["clean_ours"], "clean")}
    assert len(want["hub"]) == len(TEXTS) and want["hub"] != want["ours"]
    # Not "served" (hub's SavedModel in TF Serving's layout): its hand-off, all extract_features
    # adds, is test_init_checkpoint_of_training_commands[*-served].
    for variant in ("alone", "hub", "ours"):
        if variant == "alone":
            with pytest.raises(BertError) as e:
                run(src["paths"][variant], variant)
            one_line(e, "--init_checkpoint=", "no BERT encoder variables")
            continue
        assert run(src["paths"][variant], variant) == want[variant], variant


# slow: test_export_savedmodel[hub] (the command's export of a hand-off Source; the served
# and ours Sources are read as data in test_init_checkpoint_of_training_commands[*-served/ours])
@pytest.mark.parametrize("variant", ["alone", "hub",
                                     pytest.param("served", marks=pytest.mark.slow),
                                     pytest.param("ours", marks=pytest.mark.slow)])
def test_export_savedmodel(src, variant, tmp_path):
    path, out = src["paths"][variant], str(tmp_path / "enc")
    argv = [f"--init_checkpoint={path}", "--kind=encoder", f"--export_dir={out}"]
    if variant == "alone":
        with pytest.raises(BertError) as e:
            run_export_savedmodel(argv)
        one_line(e, f"--init_checkpoint={path}: ", "no BERT encoder variables")
        assert not os.path.exists(out)
        return
    run_export_savedmodel(argv)
    assert_same(weights_of(bert_tf.from_pretrained(out)), src["want"])  # read as data too


def _copy(src_dir, dst):
    shutil.copytree(src_dir, dst)
    return str(dst)


def test_bad_savedmodels_get_one_line_and_run_nothing(src, tmp_path):
    hub = src["paths"]["hub"]
    cases = {}
    d = _copy(hub, tmp_path / "no_variables")
    shutil.rmtree(os.path.join(d, "variables"))
    cases[d] = "no variables/ checkpoint"
    d = _copy(hub, tmp_path / "short_pb")
    pb = os.path.join(d, "saved_model.pb")
    data = open(pb, "rb").read()
    open(pb, "wb").write(data[:len(data) // 2])
    cases[d] = "saved_model.pb: truncated or not a SavedModel"
    d = _copy(hub, tmp_path / "short_data")
    data_file = os.path.join(d, "variables", "variables.data-00000-of-00001")
    data = open(data_file, "rb").read()
    open(data_file, "wb").write(data[:len(data) // 3])
    cases[d] = "truncated"
    d = _copy(hub, tmp_path / "short_index")
    index = os.path.join(d, "variables", "variables.index")
    open(index, "wb").write(open(index, "rb").read()[:40])
    cases[d] = "variables/"
    for path, part in cases.items():
        for read in (bert_tf.from_pretrained,
                     lambda p: convert("tfhub", p, "hf", str(tmp_path / "out")),
                     lambda p: handoff.hand_off(
                         dataclasses.replace(_pretraining_options(), init_checkpoint=p), set())):
            with pytest.raises(BertError) as e:
                read(path)
            one_line(e, part)
    assert not os.path.exists(tmp_path / "out")


def _pretraining_options():
    from bert_tf.pretraining.options import PretrainingOptions
    return PretrainingOptions()


def test_asset_names_cannot_leave_the_savedmodel(src, tmp_path):
    from tensorflow.core.protobuf import saved_model_pb2
    d = _copy(src["paths"]["hub"], tmp_path / "hub")
    (tmp_path / "secret.txt").write_text("not a vocab\n")
    pb = os.path.join(d, "saved_model.pb")
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(open(pb, "rb").read())
    for name in ("../../secret.txt", str(tmp_path / "secret.txt")):
        proto.meta_graphs[0].asset_file_def[0].filename = name
        open(pb, "wb").write(proto.SerializeToString())
        with pytest.raises(BertError) as e:
            bert_tf.from_pretrained(d)
        one_line(e, repr(name), "refusing to read outside")


def test_json_configs_are_size_bounded(src, monkeypatch):
    from bert_tf import fileio
    monkeypatch.setattr(fileio, "MAX_JSON_BYTES", 64)
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(src["hf"])
    one_line(e, "config.json: over ")
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(src["paths"]["ours"])
    one_line(e, "bert_tf_export.json: over ")
