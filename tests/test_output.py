"""What a person reads: a pre-training run's console output (progress lines, plain warnings,
one tqdm bar in a file, stdout naming what was exported), the loop length behind the
progress lines, and every tqdm bar going through bert_tf.progress.

The run is one run_pretraining.py process (1-layer model, 100 steps, the encoder export only:
the four text-in exports are test_formats' `src`; their stdout lines are checked on folders).
"""
import io
import os
import re
import subprocess
import sys

import pytest

from bert_tf import progress
from bert_tf.training import reporting
from conftest import tiny_bert_config, write_pretraining_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]


def test_loop_length_gives_ten_lines_off_tpu_and_keeps_tpu_loops():
    assert reporting.loop_steps(1000, 300, on_tpu=False) == 30
    assert reporting.loop_steps(1000, 100000, on_tpu=False) == 1000  # long runs: unchanged
    assert reporting.loop_steps(10, 300, on_tpu=False) == 10  # a shorter loop is kept
    assert reporting.loop_steps(1000, 25, on_tpu=False) == 2
    assert reporting.loop_steps(1000, 5, on_tpu=False) == 1
    assert reporting.loop_steps(1000, 300, on_tpu=True) == 1000
    for steps in (21, 50, 300, 999, 5000):
        loops = -(-steps // reporting.loop_steps(1000, steps, on_tpu=False))
        assert loops >= 10, steps


class _File(io.StringIO):
    def isatty(self):
        return False


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_bar_in_a_file_is_written_once():
    out = _File()
    bar = progress.bar(total=300, desc="train", unit="step", file=out)
    for i in range(10):
        bar.update(30)
        bar.set_postfix(loss=f"{1 / (i + 1):.4f}")  # refreshes on a terminal
    bar.close()
    for _ in progress.bar(range(500), desc="features", file=out):
        pass
    lines = out.getvalue().split("\n")
    assert "\r" not in out.getvalue()
    assert len(lines) == 3 and lines[2] == "", lines
    assert lines[0].startswith("train: 100%") and "300/300" in lines[0]
    assert "loss=0.1000" in lines[0]
    assert lines[1].startswith("features: 100%") and "500/500" in lines[1]
    # On a terminal it redraws in place as usual.
    tty = _Terminal()
    bar = progress.bar(total=3, desc="t", file=tty, mininterval=0)
    for _ in range(3):
        bar.update(1)
    bar.close()
    assert tty.getvalue().count("\r") >= 4


def test_every_tqdm_bar_goes_through_bert_tf_progress():
    users = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, "bert_tf")):
        for name in files:
            path = os.path.join(dirpath, name)
            if name.endswith(".py") and name != "progress.py":
                text = open(path, encoding="utf-8").read()
                if re.search(r"^\s*(from tqdm|import tqdm)", text, re.M):
                    users.append(os.path.relpath(path, ROOT))
    assert users == []


STEPS = 100  # loop_steps: 10 steps a loop, 10 progress lines


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """bert-run-pretraining for STEPS steps from an encoder-only Hugging Face directory,
    without --vocab_file (one export, not four), stderr to a file as under nohup or a
    scheduler."""
    from bert_tf.convert import hf
    from bert_tf.modeling.encoder import BertEncoder
    from bert_tf.modeling.models import build_model
    d = tmp_path_factory.mktemp("output")
    vocab = d / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    encoder = build_model(BertEncoder.from_bert_config(tiny_bert_config(num_hidden_layers=1)))
    hf.save_hf_directory(encoder, str(d / "minilm"), str(vocab))
    os.remove(d / "minilm" / "vocab.txt")  # no vocab handed off: the encoder export only
    write_pretraining_records(d / "train.tfrecord", 64)
    err_path = d / "stderr.txt"
    with open(err_path, "w") as err:
        proc = subprocess.run(
            [sys.executable, os.path.join(ROOT, "run_pretraining.py"),
             f"--init_checkpoint={d / 'minilm'}", f"--input_file={d / 'train.tfrecord'}",
             f"--output_dir={d / 'out'}", "--do_train",
             "--max_seq_length=32", "--max_predictions_per_seq=5", "--train_batch_size=8",
             f"--num_train_steps={STEPS}", "--num_warmup_steps=10", "--learning_rate=1e-3",
             "--seed=1"],
            stdout=subprocess.PIPE, stderr=err, text=True, cwd=d, timeout=900,
            env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    stderr = err_path.read_text()
    assert proc.returncode == 0, stderr[-3000:]
    return dict(dir=d, stdout=proc.stdout, stderr=stderr)


def test_a_100_step_run_shows_a_curve(run):
    steps = [int(m) for m in re.findall(rf"^step (\d+)/{STEPS} loss=", run["stderr"], re.M)]
    assert len(steps) >= 10 and steps[-1] == STEPS and steps == sorted(steps), run["stderr"]


def test_warnings_are_plain_and_said_once(run):
    lines = run["stderr"].splitlines()
    assert not [line for line in lines if re.match(r"[IWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\]", line)]
    warnings = [line for line in lines if "warning" in line.lower()]
    assert all(line.startswith("warning: ") for line in warnings), warnings
    heads = [line for line in warnings if "masked-LM and next-sentence heads" in line]
    assert len(heads) == 1, warnings
    assert "expected when pre-training continues from an encoder checkpoint" in heads[0]
    # One bar, written once (with the final count), not once per refresh.
    assert run["stderr"].count("train: ") == 1, run["stderr"]
    assert re.search(rf"^\r?train: 100%.*{STEPS}/{STEPS}", run["stderr"], re.M)


def test_stdout_ends_with_what_was_exported(run):
    export = run["dir"] / "out" / "export"
    assert run["stdout"].strip().splitlines()[-1] == (
        f"exported the encoder to {export} (ids in; add --vocab_file for text-in models)")
    assert os.path.isfile(export / "saved_model.pb")


def test_with_a_vocab_the_four_exports_newest_versions_are_named(tmp_path):
    """With --vocab_file, the lines of the four models' newest versions (TF Serving's layout,
    as test_formats' `src` export writes it); the folders here are empty."""
    from bert_tf.export.pretraining import export_lines
    from bert_tf.pretraining.options import PretrainingOptions
    export = tmp_path / "export"
    for name in ("bert", "bert_embeddings", "bert_preprocessor", "bert_encoder"):
        for version in ("1", "2", "tmp-3"):  # a temp folder is no version
            (export / name / version).mkdir(parents=True)
    options = PretrainingOptions(vocab_file="vocab.txt", model_name="bert")
    assert export_lines(str(export), options) == [
        f"exported {export}/bert/2 (text in -> fill-mask)",
        f"exported {export}/bert_embeddings/2 (text in -> embeddings)",
        f"exported {export}/bert_preprocessor/2 (text in -> encoder inputs: TF Hub "
        "preprocessor)",
        f"exported {export}/bert_encoder/2 (encoder inputs -> encoder outputs: TF Hub "
        "encoder)"]
