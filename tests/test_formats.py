"""One format table (bert_tf.convert.formats): the same source gives the same model through the
Python API and every command, each source is read once per command, no temp folder is left,
and each format's name is a string in at most two files (issue 32)."""
import ast
import dataclasses
import functools
import json
import os
import pathlib
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

import bert_tf
from bert_tf import BertError
from bert_tf.convert import formats
from bert_tf.convert.__main__ import convert
from test_convert_encoder_only import write_bert_model_dir
from conftest import run_export_savedmodel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = ["the movie was good", "a dull film", "really not awful , good", ""]
ST_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize",
     "type": "sentence_transformers.models.Normalize"}]
ST_SEQ = 24  # sentence_bert_config.json's max_seq_length (the tiny model has 40 positions)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    base = tmp_path_factory.mktemp("formats")
    hf_dir = write_bert_model_dir(base)  # exact GELU ("gelu" in HF's config.json)
    st = base / "st"
    shutil.copytree(hf_dir, st)
    (st / "1_Pooling").mkdir()
    (st / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 16, "pooling_mode_cls_token": False,
         "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False}))
    (st / "modules.json").write_text(json.dumps(ST_MODULES))
    (st / "sentence_bert_config.json").write_text(json.dumps(
        {"max_seq_length": ST_SEQ, "do_lower_case": False}))
    # What run_pretraining leaves in --output_dir: an object checkpoint and, with --vocab_file,
    # the TF Serving exports under export/ (no bert_config.json); initialised from `st`.
    run = base / "run"
    pretrainer = bert_tf.from_pretrained(str(st), task="pretraining")
    tf.train.Checkpoint(model=pretrainer).write(str(run / "model.ckpt-3"))
    from bert_tf.export import serving
    from bert_tf.pretraining.options import PretrainingOptions
    from bert_tf.pretraining.pretraining_export import export_pretrained
    options = PretrainingOptions(init_checkpoint=str(st), vocab_file=f"{hf_dir}/vocab.txt",
                                 do_lower_case=True, max_seq_length=ST_SEQ, model_name="bert")
    # Less its fill-mask model (a model trace and save) and its preprocessor (a tokenizer trace
    # and save, ~7 s), which no test here reads (the run directory is read through its newest
    # export that records a bert_config: the encoder, written last): test_training's
    # test_vocab_file_exports_text_in_models_for_serving writes and serves all four.
    from bert_tf.export import pretraining as pretraining_exports
    export_for_serving = serving.export_for_serving
    with_warmup = pretraining_exports._with_warmup
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(serving, "export_for_serving", lambda *a, task, **kw: None
                   if task == "fill_mask" else export_for_serving(*a, task=task, **kw))
        mp.setattr(pretraining_exports, "_with_warmup", lambda fn, final_dir, requests: None
                   if "bert_preprocessor" in final_dir else with_warmup(fn, final_dir, requests))
        export_pretrained(pretrainer, str(run / "export"), options)
    assert sorted(os.listdir(run / "export")) == ["bert_embeddings", "bert_encoder"]
    # bert_tf's own encoder export (TF Hub-style, vocab asset and do_lower_case inside): the
    # one run_pretraining wrote (with its mlm; one without: test_untrusted_sources' clean_ours).
    encoder_export = str(run / "export" / "bert_encoder" / "1")
    assert os.path.exists(os.path.join(encoder_export, "assets", "vocab.txt"))
    emb = bert_tf.from_pretrained(str(st), task="embeddings", text_input=True)
    # A call, not predict(): the same numbers without tracing a predict function (~8 s).
    return dict(base=base, hf=hf_dir, st=str(st), run=str(run), encoder=encoder_export,
                emb=emb, want=emb(tf.constant(TEXTS), training=False).numpy())


def encoder_outputs(path, ids):
    out = bert_tf.from_pretrained(path)(ids, training=False)
    return {k: out[k].numpy() for k in ("sequence_output", "pooled_output")}


def assert_same_model(a, b, ids):
    for k, v in encoder_outputs(a, ids).items():
        np.testing.assert_allclose(v, encoder_outputs(b, ids)[k], atol=1e-5, err_msg=k)


def ids_of(src):
    return {k: v.numpy() for k, v in src["emb"].preprocessor(tf.constant(TEXTS)).items()}


def _count_reads(monkeypatch):
    """The paths every format's read() gets from now on (until monkeypatch.undo())."""
    reads = []

    def counted(fmt):
        def read(path):
            reads.append(path)
            return fmt.read(path)
        return dataclasses.replace(fmt, read=read)
    monkeypatch.setattr(formats, "FORMATS", tuple(counted(f) for f in formats.FORMATS))
    return reads


def test_export_savedmodel_embeddings_serve_what_from_pretrained_gives(src, tmp_path,
                                                                      monkeypatch):
    want = src["want"]  # masked mean, L2-normalised (sentence-transformers' vectors)
    np.testing.assert_allclose(np.linalg.norm(want[:3], axis=1), 1.0, atol=1e-6)
    out = str(tmp_path / "emb")
    reads = _count_reads(monkeypatch)
    # In this process (the command as a process: test_export_serving's errors test)
    assert run_export_savedmodel([f"--init_checkpoint={src['st']}", "--task=embeddings",
                                  f"--export_dir={out}"]) == out
    monkeypatch.undo()
    # The source is read once for config, pooling and weights (before: 3).
    assert len(reads) == 1, reads
    served = tf.saved_model.load(out).signatures["serving_default"](text=tf.constant(TEXTS))
    np.testing.assert_allclose(served["embedding"].numpy(), want, atol=1e-5)
    meta = json.load(open(f"{out}/assets.extra/bert_tf_export.json"))
    assert (meta["pooling"], meta["normalize"], meta["seq_length"]) == ("mean", True, ST_SEQ)
    # run_pretraining's bert_embeddings export pools as its --init_checkpoint declares too.
    emb_dir = os.path.join(src["run"], "export", "bert_embeddings", "1")
    served = tf.saved_model.load(emb_dir).signatures["serving_default"](text=tf.constant(TEXTS))
    np.testing.assert_allclose(served["embedding"].numpy(), want, atol=1e-5)


def test_hf_config_json_is_read_as_hf_everywhere(src, tmp_path):
    config_json = os.path.join(src["hf"], "config.json")
    assert formats.read_config(config_json).hidden_act == "gelu_exact"
    out = str(tmp_path / "hf_out")
    convert("hf", src["hf"], "hf", out, bert_config_file=config_json)
    assert json.load(open(f"{out}/config.json"))["hidden_act"] == "gelu"
    assert_same_model(src["hf"], out, ids_of(src))
    # bert-create-pretraining-data checks --bert_config_file (either dialect) too.
    from bert_tf.pretraining_data import runner
    opts = types.SimpleNamespace(bert_config_file=config_json, max_seq_length=64,
                                 vocab_file="vocab.txt")
    with pytest.raises(BertError, match="max_position_embeddings 40 of .*config.json"):
        runner._check_bert_config(opts, 20)


def test_convert_reads_a_run_pretraining_directory_with_no_extra_flags(src, tmp_path):
    out = str(tmp_path / "from_run")
    convert("bert_tf", src["run"], "hf", out)
    assert os.path.exists(f"{out}/vocab.txt")  # the export's vocab, found without --vocab_file
    assert_same_model(src["run"], out, ids_of(src))
    assert_same_model(src["st"], out, ids_of(src))


@pytest.mark.parametrize("from_format", ["tfhub", "auto"])
def test_convert_reads_bert_tfs_own_encoder_export(src, tmp_path, from_format):
    out = str(tmp_path / "from_export")
    convert(from_format, src["encoder"], "hf", out)
    assert_same_model(src["hf"], out, ids_of(src))


def test_default_seq_length_follows_sentence_bert_config(src):
    assert src["emb"].preprocessor.seq_length == ST_SEQ
    enc = bert_tf.from_pretrained(src["st"], text_input=True, seq_length=12)
    assert enc.preprocessor.seq_length == 12  # given wins
    with pytest.raises(BertError, match="^seq_length=128: must be in"):  # no such file: 128
        bert_tf.from_pretrained(src["hf"], text_input=True)


def test_each_source_read_once_per_command_and_no_temp_folder(src, tmp_path, monkeypatch):
    from bert_tf.convert import checkpoints, handoff
    from bert_tf.pretraining.options import PretrainingOptions
    reads = []

    def counted(fmt):
        def read(path):
            reads.append((fmt.name, path))
            return fmt.read(path)
        return dataclasses.replace(fmt, read=read)
    monkeypatch.setattr(formats, "FORMATS", tuple(counted(f) for f in formats.FORMATS))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    for path in (src["hf"], src["encoder"], src["run"]):
        reads.clear()
        options, read = handoff.hand_off(PretrainingOptions(init_checkpoint=path), set())
        assert len(reads) == 1, reads
        model = bert_tf.modeling.models.BertPretrainer.from_bert_config(read.bert_config)
        checkpoints.load_checkpoint(model, read)  # the Source the hand-off read: no new read
        assert len(reads) == 1, reads
    assert os.listdir(tmp) == []


# A command's main() in a child process with every format's read counted; prints the paths.
_COUNTED_COMMAND = (
    "import dataclasses, importlib, json, sys\n"
    "from bert_tf.convert import formats\n"
    "reads = []\n"
    "def counted(fmt):\n"
    "    def read(path):\n"
    "        reads.append(path)\n"
    "        return fmt.read(path)\n"
    "    return dataclasses.replace(fmt, read=read)\n"
    "formats.FORMATS = tuple(counted(f) for f in formats.FORMATS)\n"
    "command = importlib.import_module(sys.argv[1])\n"
    "sys.argv = sys.argv[1:]\n"
    "try:\n"
    "    command.main()\n"
    "except SystemExit as e:\n"
    "    assert not e.code, e.code\n"
    "print(json.dumps(reads))\n")


def _cola(d):
    d.mkdir()
    words = ["the movie was good", "a dull film", "really not awful", "very fine plot"]
    (d / "train.tsv").write_text("".join(f"s\t{i % 2}\t\t{t}\n" for i, t in enumerate(words)))
    return str(d)


# run_pretraining's case writes four SavedModels (~37 s): the same hand-off as the others, slow.
# slow (export_savedmodel): test_export_savedmodel_embeddings_serve_what_from_pretrained_gives
# (bert-export-savedmodel's run() with its --init_checkpoint read counted: once, and the
# embeddings export served equal to from_pretrained's; a SavedModel source read once by a
# command: the extract_features case)
@pytest.mark.parametrize("command", ["run_classifier",
                                     pytest.param("run_pretraining", marks=pytest.mark.slow),
                                     "extract_features",
                                     pytest.param("export_savedmodel", marks=pytest.mark.slow)])
def test_a_command_reads_init_checkpoint_once(src, tmp_path, command, monkeypatch):
    """The Source the hand-off read is the one the run's config, load and export use.
    run_pretraining runs main() in a child process (flag parsing included); run_classifier,
    extract_features and export_savedmodel run their run() after the hand-off (what main()
    runs after parsing flags, which reads nothing) in this process, counted alike."""
    from conftest import write_pretraining_records
    from test_convert_encoder_only import V
    out = str(tmp_path / "out")
    train = [f"--output_dir={out}", "--do_train", "--num_train_steps=1",
             "--learning_rate=1e-30", "--train_batch_size=2", "--max_seq_length=16"]
    # A TF Hub-style SavedModel without a config file: read for config, weights and vocab.
    init = src["encoder"]
    if command == "run_pretraining":
        # A sentence-transformers directory: its pooling goes to the embeddings export.
        init = src["st"]
        records = tmp_path / "train.tfrecord"
        write_pretraining_records(records, 4, seq_len=16, max_pred=2, vocab_size=V)
        args = [*train, f"--input_file={records}", "--num_warmup_steps=0",
                "--max_predictions_per_seq=2"]
    elif command == "export_savedmodel":
        args = ["--task=embeddings", "--seq_length=16", f"--export_dir={out}"]
    elif command == "extract_features":
        (tmp_path / "in.txt").write_text("\n".join(TEXTS[:3]) + "\n")
        args = [f"--input_file={tmp_path / 'in.txt'}", f"--output_file={out}.jsonl",
                "--layers=-1", "--max_seq_length=16"]
    if command != "run_pretraining":
        reads = _count_reads(monkeypatch)
        if command == "export_savedmodel":
            assert run_export_savedmodel([f"--init_checkpoint={init}", *args]) == out
        elif command == "run_classifier":  # in-process: no TensorFlow start-up (~8 s)
            from bert_tf.tasks import classifier, cli
            cli.with_handoff(classifier.run)(classifier.ClassifierConfig(
                init_checkpoint=init, output_dir=out, do_train=True, num_train_steps=1,
                learning_rate=1e-30, train_batch_size=2, max_seq_length=16, task_name="cola",
                data_dir=_cola(tmp_path / "cola"), seed=1, progress=False, do_export=False))
        else:
            from bert_tf.tasks import cli, features
            cli.with_handoff(features.run)(features.FeatureConfig(
                init_checkpoint=init, input_file=str(tmp_path / "in.txt"),
                output_file=f"{out}.jsonl", layers="-1", max_seq_length=16))
        monkeypatch.undo()
    else:
        res = subprocess.run(
            [sys.executable, "-c", _COUNTED_COMMAND, f"bert_tf.commands.{command}",
             f"--init_checkpoint={init}", *args], capture_output=True, text=True,
            cwd=ROOT, env=dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3"))
        assert res.returncode == 0, res.stderr[-3000:]
        reads = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(reads) == 1, reads  # before: 3 (hand-off + config or pooling + load)
    if command == "export_savedmodel":
        served = tf.saved_model.load(out).signatures["serving_default"](text=tf.constant(TEXTS))
        want = bert_tf.from_pretrained(src["hf"], task="embeddings", text_input=True,
                                       seq_length=16).predict(TEXTS, verbose=0)
        np.testing.assert_allclose(served["embedding"].numpy(), want, atol=1e-5)
        return
    model = bert_tf.from_pretrained(src["hf"])
    if command == "extract_features":  # the last layer of [CLS], rounded to 6 places
        ids = {k: v[:, :16] for k, v in ids_of(src).items()}
        want = model(ids, training=False)["sequence_output"].numpy()[:, 0]
        got = [json.loads(line)["features"][0]["layers"][0]["values"]
               for line in open(f"{out}.jsonl")]
        np.testing.assert_allclose(got, want[:3], atol=2e-6)
        return
    # A learning rate far below float32 resolution: the checkpoint holds the loaded weights.
    want = {v.path: v.numpy() for v in model.weights}
    for v in model.weights:
        v.assign(tf.zeros_like(v))
    status = tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=model)).read(
        tf.train.latest_checkpoint(out))
    status.expect_partial().assert_existing_objects_matched()
    got = {v.path: v.numpy() for v in model.weights}
    assert sorted(got) == sorted(want)
    for name, value in got.items():
        np.testing.assert_array_equal(value, want[name], err_msg=name)
    if command == "run_pretraining":
        meta = json.load(open(f"{out}/export/bert_embeddings/1/assets.extra/"
                              "bert_tf_export.json"))
        assert (meta["pooling"], meta["normalize"]) == ("mean", True)


@functools.lru_cache(maxsize=None)
def _constants_by_file():
    """{file: the constants in it}, each file parsed once (not once per format name)."""
    out = {}
    for f in pathlib.Path(ROOT, "bert_tf").rglob("*.py"):
        tree = ast.parse(f.read_text())
        # The package's own name as a logger or Keras package is not the format's.
        other = {id(a) for c in ast.walk(tree) if isinstance(c, ast.Call)
                 for a in [*c.args, *(k.value for k in c.keywords)]
                 if getattr(c.func, "attr", getattr(c.func, "id", "")) == "getLogger"
                 or any(k.arg == "package" and k.value is a for k in c.keywords)}
        out[str(f.relative_to(ROOT))] = [n.value for n in ast.walk(tree)
                                         if isinstance(n, ast.Constant) and id(n) not in other]
    return out


def _literal_files(name):
    return {f for f, values in _constants_by_file().items()
            if any(v == name for v in values)}


def test_each_format_is_named_in_at_most_two_files():
    names = {n for f in formats.FORMATS for n in (f.name, *f.aliases)}
    assert {"tf1", "hf", "bert_tf", "model_garden", "tfhub", "keras_hub"} <= names
    for name in names:
        files = _literal_files(name)
        assert len(files) <= 2, (name, sorted(files))
