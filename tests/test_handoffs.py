"""Hand-offs between the parts: from_pretrained / --init_checkpoint read `.keras` files and the
`bert-convert --to=savedmodel` pair, and --init_checkpoint supplies --bert_config_file,
--vocab_file and --do_lower_case where the source carries them."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import bert_tf
from bert_tf import BertError
from bert_tf.convert.handoff import fill_options
from bert_tf.pretraining.options import PretrainingOptions
from test_convert_encoder_only import write_bert_model_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = ["the movie was good", "a dull film"]


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return write_bert_model_dir(tmp_path_factory.mktemp("handoff"))


def test_init_checkpoint_fills_config_vocab_and_casing(hf_dir, capsys):
    from bert_tf.modeling.config import BertConfig
    o = fill_options(PretrainingOptions(init_checkpoint=hf_dir), explicit=set())
    assert BertConfig.from_json_file(o.bert_config_file).to_dict()["hidden_size"] == 16
    assert o.vocab_file == f"{hf_dir}/vocab.txt" and o.do_lower_case is True
    assert capsys.readouterr().err.splitlines() == [
        f"note: --bert_config_file, --vocab_file, --do_lower_case=True from "
        f"--init_checkpoint={hf_dir}"]
    # The same values given explicitly: nothing to take, no contradiction.
    same = PretrainingOptions(init_checkpoint=hf_dir, vocab_file=f"{hf_dir}/vocab.txt",
                              bert_config_file=o.bert_config_file, do_lower_case=True)
    assert fill_options(same, {"vocab_file", "bert_config_file", "do_lower_case"}) == same


def test_contradicting_flags_are_one_line(hf_dir, tmp_path):
    cfg = json.load(open(os.path.join(os.path.dirname(hf_dir), "bert_config.json")))
    (tmp_path / "big.json").write_text(json.dumps(dict(cfg, hidden_size=32)))
    (tmp_path / "v.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    cases = [(dict(do_lower_case=False), "--do_lower_case=False: --init_checkpoint=.* is an "
                                         r"uncased model \(do_lower_case=True\)$"),
             (dict(bert_config_file=str(tmp_path / "big.json")),
              "--bert_config_file=.*big.json: hidden_size 32 but --init_checkpoint=.* has 16 "),
             (dict(vocab_file=str(tmp_path / "v.txt")), "--vocab_file=.*v.txt: not the vocab")]
    for given, want in cases:
        with pytest.raises(BertError, match="^" + want) as e:
            fill_options(PretrainingOptions(init_checkpoint=hf_dir, **given), set(given))
        assert "\n" not in str(e.value)


# The `bert-convert --to=savedmodel` pair as a from_pretrained source (the pair directory and its
# encoder/, vocab and casing from the sibling preprocessor): tests/test_convert_cli.py::
# test_peer_free_pairs_keep_the_outputs[savedmodel-hf], on the pair that test exports anyway.


def test_keras_file_loads(hf_dir, tmp_path):
    clf = bert_tf.from_pretrained(hf_dir, task="classification", num_classes=2,
                                  text_input=True, seq_length=16)
    clf.save(str(tmp_path / "clf.keras"))
    src = bert_tf.pretrained.read_pretrained(str(tmp_path / "clf.keras"))
    assert (src.detected.format, src.do_lower_case, src.casing_from) == ("keras", True, "source")
    assert open(src.vocab_file).read() == open(f"{hf_dir}/vocab.txt").read()
    again = bert_tf.from_pretrained(str(tmp_path / "clf.keras"), task="classification",
                                    num_classes=2, text_input=True, seq_length=16)
    np.testing.assert_array_equal(again(TEXT).numpy(), clf(TEXT).numpy())  # eager calls


def test_extract_features_needs_only_init_checkpoint(hf_dir, tmp_path):
    # The command as a process (the checkout's extract_features.py: bert-extract-features'
    # main(), its flags parsed), to success: exit 0, its `note:` line on stderr and its
    # `wrote N lines` line last on stdout. Its BertError as one line: in-process in
    # tests/test_vocab_check.py::test_extract_features_refuses_a_wrong_vocab_in_one_line.
    (tmp_path / "in.txt").write_text("the movie was good\n")
    out = tmp_path / "o.jsonl"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "extract_features.py"), f"--init_checkpoint={hf_dir}",
         "--layers=-1", f"--input_file={tmp_path / 'in.txt'}", f"--output_file={out}",
         "--max_seq_length=16"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == f"wrote 1 lines to {out}"
    assert (f"note: --bert_config_file, --vocab_file, --do_lower_case=True from "
            f"--init_checkpoint={hf_dir}") in proc.stderr.splitlines()
    line = json.loads(out.read_text().splitlines()[0])
    assert [f["token"] for f in line["features"]] == ["[CLS]", "the", "movie", "was", "good",
                                                      "[SEP]"]


# Lazy submodules (bert_tf.export.load_as_keras_model after `import bert_tf`), in a
# TensorFlow process already started: tests/test_pretrained.py::
# test_keras_file_loads_after_import_bert_tf; `import bert_tf` imports no TensorFlow:
# tests/test_pretrained.py::test_import_bert_tf_is_light_and_registers_every_class.
