"""Export plumbing without a BERT trace: atomic writes, failure cleanup, models.config, the
export_savedmodel.py script (from an original-format TF1 checkpoint) and its errors."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import bert_tf  # noqa: F401
import keras
import tensorflow as tf

from bert_tf import BertError
from bert_tf.export import common, serving
from conftest import tiny_bert_config

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


class Tiny(tf.Module):
    def __init__(self):
        super().__init__()
        self.v = tf.Variable(2.0)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def __call__(self, x):
        return {"y": x * self.v}


def test_write_saved_model_publishes_complete_dirs_only(tmp_path):
    final = str(tmp_path / "m" / "1")
    seen = {}

    def before_publish(tmp):
        seen["tmp"] = tmp
        seen["final_exists"] = os.path.exists(final)
        seen["versions"] = serving.version_dirs(str(tmp_path / "m"))
        assert os.path.exists(os.path.join(tmp, "saved_model.pb"))

    m = Tiny()
    common.write_saved_model(m, final, {"serving_default": m.__call__}, {"kind": "t"},
                             before_publish=before_publish, replace=False)
    assert seen["final_exists"] is False and seen["versions"] == []
    assert os.path.basename(seen["tmp"]).startswith("1.tmp-")   # not all digits: never served
    assert sorted(os.listdir(tmp_path / "m")) == ["1"]
    assert common.read_metadata(final) == {"kind": "t"}
    assert tf.saved_model.load(final)(tf.constant([3.0]))["y"].numpy().tolist() == [6.0]
    with pytest.raises(BertError, match="already exists"):
        common.write_saved_model(m, final, None, {}, replace=False)
    # replace=True swaps in a new complete version
    m.v.assign(5.0)
    common.write_saved_model(m, final, None, {"kind": "t2"})
    assert sorted(os.listdir(tmp_path / "m")) == ["1"]
    assert tf.saved_model.load(final)(tf.constant([1.0]))["y"].numpy().tolist() == [5.0]


def test_failing_export_leaves_nothing_under_the_final_name(tmp_path):
    final = str(tmp_path / "m" / "7")

    def fail(tmp):
        with open(os.path.join(tmp, "assets.extra", "half-written"), "w") as f:
            f.write("x")
        raise RuntimeError("disk full")

    m = Tiny()
    with pytest.raises(RuntimeError, match="disk full"):
        common.write_saved_model(m, final, None, {}, before_publish=fail)
    assert os.listdir(tmp_path / "m") == []
    assert serving.next_version(str(tmp_path / "m")) == 1
    # an existing export survives a failed replacement untouched
    common.write_saved_model(m, final, None, {"kind": "old"})
    with pytest.raises(RuntimeError, match="disk full"):
        common.write_saved_model(m, final, None, {"kind": "new"}, before_publish=fail)
    assert sorted(os.listdir(tmp_path / "m")) == ["7"]
    assert common.read_metadata(final) == {"kind": "old"}


def test_version_and_name_checks(tmp_path):
    for v in ("12", "3", "x", "1.tmp-5-ab", "04"):
        (tmp_path / "m" / v).mkdir(parents=True)
    assert serving.version_dirs(str(tmp_path / "m")) == [3, 4, 12]
    assert serving.next_version(str(tmp_path / "m")) == 13
    assert serving.next_version(str(tmp_path / "nothing")) == 1
    with pytest.raises(BertError, match="--model_name"):
        serving.export_for_serving(str(tmp_path), "../evil", model=None, vocab_file="v")
    with pytest.raises(BertError, match="--version: must be a positive integer"):
        serving.export_for_serving(str(tmp_path), "m", 0, model=None, vocab_file="v")
    with pytest.raises(BertError, match="version 12 already exists"):
        serving.export_for_serving(str(tmp_path), "m", 12, model=None, vocab_file="v")


def test_models_config_matches_the_checked_in_example(tmp_path):
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2
    path = serving.write_models_config(str(tmp_path / "models.config"), [
        ("bert_fill_mask", "/models/bert_fill_mask"),
        {"name": "bert_classifier", "base_path": "/models/bert_classifier", "versions": [1, 2]}])
    cfg = text_format.Parse(open(path).read(), model_server_config_pb2.ModelServerConfig())
    items = cfg.model_config_list.config
    assert [(c.name, c.base_path, c.model_platform) for c in items] == [
        ("bert_fill_mask", "/models/bert_fill_mask", "tensorflow"),
        ("bert_classifier", "/models/bert_classifier", "tensorflow")]
    assert list(items[1].model_version_policy.specific.versions) == [1, 2]
    with pytest.raises(BertError, match="duplicate model name"):
        serving.models_config_text([("a", "/a"), ("a", "/b")])
    # the example shipped in export/ parses as a ModelServerConfig too
    example = text_format.Parse(open(os.path.join(ROOT, "export", "models.config")).read(),
                                model_server_config_pb2.ModelServerConfig())
    assert {c.name for c in example.model_config_list.config} >= {"bert_fill_mask"}


def _script(args, timeout=300):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, os.path.join(ROOT, "export_savedmodel.py")] + args,
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_export_script_from_original_tf1_checkpoint(tmp_path):
    from bert_tf import tokenization
    from bert_tf.convert import checkpoints
    from bert_tf.modeling.encoder import BertEncoder
    from bert_tf.modeling.models import BertPretrainer, build_model
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    cfg = tiny_bert_config(vocab_size=len(vocab))
    cfg.to_json_file(str(tmp_path / "bert_config.json"))
    keras.utils.set_random_seed(5)
    prefix = checkpoints.save_tf1_checkpoint(
        build_model(BertPretrainer(BertEncoder.from_bert_config(cfg))),
        str(tmp_path / "bert_model.ckpt"))
    assert checkpoints.is_tf1_checkpoint(prefix)
    # The script's run() in this process (the script as a process: its errors in
    # test_export_script_errors_are_one_line; a successful export, exit 0 and its
    # `exported <path>` line: test_serve_path.py::test_export_savedmodel_takes_a_keras_file)
    from conftest import run_export_savedmodel
    version = tmp_path / "export" / "bert" / "1"
    assert run_export_savedmodel([f"--bert_config_file={tmp_path / 'bert_config.json'}",
                                  f"--vocab_file={tmp_path / 'vocab.txt'}",
                                  f"--init_checkpoint={prefix}", "--task=embeddings",
                                  f"--export_base={tmp_path / 'export'}", "--model_name=bert",
                                  "--seq_length=12"]) == str(version)
    assert (version / "assets.extra" / "tf_serving_warmup_requests").exists()
    # the export computes what the TF1 checkpoint's encoder computes
    enc = BertEncoder.from_bert_config(cfg)
    ids = {"input_word_ids": np.array([[2, 5, 6, 7, 8, 5, 9, 3]], np.int32),  # the cat ... mat
           "input_mask": np.ones([1, 8], np.int32), "input_type_ids": np.zeros([1, 8], np.int32)}
    enc(ids)
    checkpoints.load_checkpoint(enc, prefix)
    want = keras.ops.convert_to_numpy(enc(ids)["pooled_output"])
    loaded = tf.saved_model.load(str(version))
    got = loaded.signatures["serving_default"](text=tf.constant(["The cat sat on the mat"]))
    np.testing.assert_allclose(got["pooled_output"].numpy(), want, atol=1e-5)
    assert tokenization.FullTokenizer(str(tmp_path / "vocab.txt")).tokenize(
        "The cat sat on the mat") == ["the", "cat", "sat", "on", "the", "mat"]
    meta = json.loads((version / "assets.extra" / "bert_tf_export.json").read_text())
    assert meta["task"] == "embeddings" and meta["seq_length"] == 12


def test_export_script_errors_are_one_line(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    proc = _script([f"--bert_config_file={tmp_path / 'missing.json'}",
                    f"--vocab_file={tmp_path / 'vocab.txt'}", f"--export_dir={tmp_path / 'out'}"])
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'missing.json'}: bert_config file not found")
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()
