"""`python -m bert_tf.convert`: tf1 -> hf -> tf1 is bit exact; bad input gives one line and no
output directory."""
import json
import os
import subprocess
import sys

import bert_tf  # noqa: F401
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertError
from bert_tf.convert.__main__ import convert

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_checkpoints import HEAD_NAMES, write_tf1_checkpoint  # noqa: E402
from test_model import random_tf1_weights, tiny_config  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("src")
    cfg = tiny_config()
    w = random_tf1_weights(cfg, np.random.default_rng(21))
    prefix = write_tf1_checkpoint(str(d / "bert_model.ckpt"), w)
    cfg.to_json_file(str(d / "bert_config.json"))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(92)]
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return d, prefix, w


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
    assert not json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["do_lower_case"]
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


def test_cli_errors_are_one_line_and_write_nothing(source, tmp_path):
    d, prefix, w = source
    enc_prefix = write_tf1_checkpoint(str(tmp_path / "enc" / "bert_model.ckpt"),
                                      {k: v for k, v in w.items() if k not in HEAD_NAMES})
    common = dict(bert_config_file=str(d / "bert_config.json"), vocab_file=str(d / "vocab.txt"))
    out = str(tmp_path / "out")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00not json")
    (tmp_path / "broken" / "config.json").write_text((d / "bert_config.json").read_text())
    cases = [
        (("tf1", enc_prefix, "hf", out), common, "use --model=encoder"),
        (("keras_hub", prefix, "hf", out), common, "--from: unknown format 'keras_hub'"),
        (("tf1", prefix, "tf1", out), dict(common, bert_config_file=None),
         "--bert_config_file: required"),
        (("tf1", prefix, "hf", out), dict(common, vocab_file=None), "--vocab_file: required"),
        (("tf1", prefix, "hf", out), dict(common, bert_config_file=str(
            tmp_path / "cfg.json")), "bert_config file not found"),
        (("hf", str(tmp_path / "broken"), "tf1", out), {}, "not a readable safetensors file"),
    ]
    for args, kwargs, needle in cases:
        with pytest.raises(BertError) as err:
            convert(*args, **kwargs)
        assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)
        assert not os.path.exists(out)
    # The encoder alone converts; an existing output is never replaced by accident.
    convert("tf1", enc_prefix, "tf1", out, model="encoder", **common)
    with pytest.raises(BertError, match="already exists"):
        convert("tf1", enc_prefix, "tf1", out, model="encoder", **common)
    assert sorted(dict(tf.train.list_variables(os.path.join(out, "bert_model.ckpt")))) == sorted(
        k for k in w if k not in HEAD_NAMES)
