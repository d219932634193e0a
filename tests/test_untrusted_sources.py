"""Reading a model runs none of its code (issue 44).

SavedModels a user hands in are read as data (`bert_tf.convert.saved_model_data`): a
SavedModel carrying a resource whose initializer writes a marker file (alone, added to a TF
Hub-style encoder, to our own encoder export, in the TF Serving layout) is read by
from_pretrained, bert-convert, --init_checkpoint and bert-export-savedmodel with the clean
source's weights, or refused in one line, and the marker never appears; `tf.saved_model.load`
on the same folders does write it (the test can fail). HF pickles are refused, paths inside
metadata stay inside the source, bad sources get one line each.
"""
import ast
import dataclasses
import json
import os
import pathlib
import pickle
import shutil

import numpy as np
import pytest
import tensorflow as tf

import bert_tf
from bert_tf import BertError
from bert_tf.convert import formats, handoff
from bert_tf.convert.__main__ import convert
from test_convert_encoder_only import write_bert_model_dir
from test_readers import assert_same, weights_of, write_hub_encoder

ROOT = pathlib.Path(__file__).resolve().parent.parent
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


@pytest.mark.slow  # two preprocessor exports, each saved twice (~30 s)
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
@pytest.mark.parametrize("command", ["run_classifier", "run_ner", "run_squad"])
def test_init_checkpoint_of_fine_tuning_commands(src, variant, command, tmp_path):
    """What each command does with --init_checkpoint before training: the hand-off
    (`tasks.cli.with_handoff`), its task model, the trainer's restore."""
    from bert_tf.modeling.models import find_encoder
    from bert_tf.tasks import classifier, finetune, ner, squad
    config_cls = {"run_classifier": classifier.ClassifierConfig, "run_ner": ner.NerConfig,
                  "run_squad": squad.SquadConfig}[command]
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
    task = _task(command, options, handoff.bert_config(options, read))
    trainer = finetune.make_trainer(task, options, read)
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
    want["served"] = want["hub"]
    assert len(want["hub"]) == len(TEXTS) and want["hub"] != want["ours"]
    for variant in VARIANTS:
        if variant == "alone":
            with pytest.raises(BertError) as e:
                run(src["paths"][variant], variant)
            one_line(e, "--init_checkpoint=", "no BERT encoder variables")
            continue
        assert run(src["paths"][variant], variant) == want[variant], variant


def _export_savedmodel(argv):
    """bert-export-savedmodel's run() in this process (its absl flags defined once)."""
    from absl import flags
    from bert_tf.commands import export_savedmodel
    if "kind" not in flags.FLAGS:
        export_savedmodel.define_flags()
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["bert-export-savedmodel", *argv])
    try:
        return export_savedmodel.run()
    finally:
        flags.FLAGS.unparse_flags()


@pytest.mark.parametrize("variant", VARIANTS)
def test_export_savedmodel(src, variant, tmp_path):
    path, out = src["paths"][variant], str(tmp_path / "enc")
    argv = [f"--init_checkpoint={path}", "--kind=encoder", f"--export_dir={out}"]
    if variant == "alone":
        with pytest.raises(BertError) as e:
            _export_savedmodel(argv)
        one_line(e, f"--init_checkpoint={path}: ", "no BERT encoder variables")
        assert not os.path.exists(out)
        return
    _export_savedmodel(argv)
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
    from bert_tf.training.options import PretrainingOptions
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


class _Unpickled:
    """Unpickling this writes a file: the proof that nothing unpickles."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("weights", ["pytorch_model.bin", "tf_model.h5"])
def test_hf_folder_without_safetensors_is_refused(src, weights, tmp_path):
    d = tmp_path / "hf"
    d.mkdir()
    for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(src["hf"], name), d / name)
    marker = tmp_path / "unpickled.txt"
    (d / weights).write_bytes(pickle.dumps(_Unpickled(str(marker))))
    for path in (str(d), str(d / weights)):
        reads = [bert_tf.from_pretrained,
                 lambda p: convert("auto", p, "tf1", str(tmp_path / "out")),
                 lambda p: convert("hf", p, "tf1", str(tmp_path / "out")),
                 lambda p: handoff.hand_off(
                     dataclasses.replace(_pretraining_options(), init_checkpoint=p), set())]
        for read in reads:
            with pytest.raises(BertError) as e:
                read(path)
            one_line(e, weights, "safetensors only", "save_pretrained(dir, "
                     "safe_serialization=True)")
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_paths_inside_metadata_stay_inside_the_source(src, tmp_path):
    # a `checkpoint` file naming a checkpoint elsewhere
    outside = tmp_path / "elsewhere"
    tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(outside / "ckpt-1"))
    d = tmp_path / "run"
    d.mkdir()
    (d / "checkpoint").write_text(f'model_checkpoint_path: "{outside / "ckpt-1"}"\n')
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(str(d))
    one_line(e, "outside this directory")
    (d / "checkpoint").write_text('model_checkpoint_path: "../elsewhere/ckpt-1"\n')
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(str(d))
    one_line(e, "outside this directory")
    # a sharded safetensors index naming a shard outside the folder
    hf = _copy(src["hf"], tmp_path / "hf")
    os.rename(os.path.join(hf, "model.safetensors"), tmp_path / "shard.safetensors")
    (pathlib.Path(hf) / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"embeddings.word_embeddings.weight": "../shard.safetensors"}}))
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(hf)
    one_line(e, "'../shard.safetensors'", "refusing to read outside")
    # a sentence-transformers Pooling module outside the model
    st = _copy(src["hf"], tmp_path / "st")
    (pathlib.Path(st) / "modules.json").write_text(json.dumps(
        [{"idx": 1, "name": "1", "path": "/etc", "type": "sentence_transformers.models.Pooling"}]))
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(st, task="embeddings")
    one_line(e, "'/etc'", "refusing to read outside")


def test_json_configs_are_size_bounded(src, monkeypatch):
    from bert_tf import fileio
    monkeypatch.setattr(fileio, "MAX_JSON_BYTES", 64)
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(src["hf"])
    one_line(e, "config.json: over ")
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(src["paths"]["ours"])
    one_line(e, "bert_tf_export.json: over ")


def _calls(tree):
    """(dotted callee, keywords) of every call in `tree`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            parts, f = [], node.func
            while isinstance(f, ast.Attribute):
                parts.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name):
                parts.append(f.id)
            yield ".".join(reversed(parts)), node.keywords


def test_readers_never_load_a_savedmodel_as_a_program():
    files = [*sorted((ROOT / "bert_tf" / "convert").glob("*.py")), ROOT / "bert_tf" /
             "pretrained.py"]
    assert len(files) > 10
    for f in files:
        tree = ast.parse(f.read_text())
        for callee, keywords in _calls(tree):
            where = f"{f.relative_to(ROOT)}: {callee}"
            assert not callee.endswith(("saved_model.load", "hub.load", "KerasLayer",
                                        "TFSMLayer", "pickle.load", "pickle.loads", "torch.load",
                                        "saved_model.loader.load")), where
            assert callee.split(".")[-1] not in ("load_v2", "load_partial"), where
            if callee.endswith("load_model") or callee.endswith("deserialize_keras_object"):
                unsafe = [k for k in keywords if k.arg == "safe_mode"
                          and not (isinstance(k.value, ast.Constant) and k.value.value is True)]
                assert not unsafe, where
        imported = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in n.names} | {n.module for n in ast.walk(tree)
                                         if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & {"tensorflow_hub", "pickle", "torch", "dill", "cloudpickle"}, f
