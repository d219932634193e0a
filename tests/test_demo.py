"""The demo pipeline end to end (what `make demo` runs), behind `slow`: with fewer steps (here
in process, and through the installed wheel in test_install.py) and in full (`bert-demo` from an
empty folder, the learning criteria). The default suite runs its helpers."""
import os
import re
import subprocess
import sys
import time

import pytest

from bert_tf import demo, resources
from bert_tf.tokenization import BasicTokenizer, vocab_tokens

from test_quiet import noisy

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def test_parse_losses_reads_only_training_loop_lines():
    log = ("I1123 training.py:365] step 50/300 loss=6.9523 mlm_loss=6.2612 lr=0.0008\n"
           "I1123 training.py:415] eval at step 300: loss=6.6130 masked_lm_accuracy=0.07\n"
           "step 100/300 loss=5.5 mlm_loss=5.0\n")
    assert demo.parse_losses(log) == [6.9523, 5.5]


def test_serving_instructions_name_the_model_and_a_rest_body():
    text = demo.serving_instructions("/srv/export", "bert_demo")
    assert "-v /srv/export/bert_demo:/models/bert_demo -e MODEL_NAME=bert_demo" in text
    assert "--model_base_path=/srv/export/bert_demo" in text
    assert "http://localhost:8501/v1/models/bert_demo:predict" in text
    assert '{"instances": ["the [MASK] records fog on more than a hundred days in some years ."]}' \
        in text


def test_steps_are_printed_as_console_commands_relative_to_the_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [sys.executable, "-m", "bert_tf.commands.run_pretraining", f"--output_dir={tmp_path}/o",
            f"--input_file={tmp_path}/d/train-*.tfrecord", "--do_train", "/elsewhere/x"]
    assert demo.shown_argv(argv) == ["bert-run-pretraining", "--output_dir=o",
                                      "'--input_file=d/train-*.tfrecord'", "--do_train",
                                      "/elsewhere/x"]
    assert demo.shown_argv([sys.executable, "-m", "bert_tf.tokenization.vocab_builder"]) == [
        "python", "-m", "bert_tf.tokenization.vocab_builder"]


def test_defaults_are_the_packaged_corpus_and_config():
    assert demo.SAMPLE_CORPUS == resources.sample_corpus()
    assert demo.TINY_CONFIG == resources.config_file("bert_tiny.json")
    assert open(demo.SAMPLE_CORPUS, encoding="utf-8").read().count("\n\n") == 10  # 11 documents
    assert os.path.exists(demo.PREDICT_SCRIPT)


def test_demo_sentences_are_from_the_corpus_and_answers_are_words_of_it():
    tok = BasicTokenizer(do_lower_case=True)
    corpus = [" ".join(tok.tokenize(line)) for line in
              open(demo.SAMPLE_CORPUS, encoding="utf-8").read().splitlines()]
    for text, answer in demo.DEMO_FILL_MASK:
        assert text.replace("[MASK]", answer) in corpus, text
    words = {w for line in corpus for w in line.split()}
    for text in demo.EMBED_SENTENCES:
        assert set(tok.tokenize(text)) <= words, text


def test_check_predictions_counts_hits_and_splits_pairs():
    fill = [{"masks": [{"tokens": [answer if i != 2 else "x", "a", "b", "c", "d"]}]}
            for i, (_, answer) in enumerate(demo.DEMO_FILL_MASK)]
    cos = [[1, .9, .2, .3, .5, .6], [.9, 1, .4, .1, .2, .3], [.2, .4, 1, .8, .7, .1],
           [.3, .1, .8, 1, .4, .5], [.5, .2, .7, .4, 1, .95], [.6, .3, .1, .5, .95, 1]]
    got = demo.check_predictions({"fill_mask": fill, "embeddings": {"cosine": cos}})
    assert demo.SAME_TOPIC == [(0, 1), (2, 3), (4, 5)]
    assert got == {"hits": [True, True, False, True, True], "same": [.9, .8, .95],
                   "cross": [.2, .3, .5, .6, .4, .1, .2, .3, .7, .1, .4, .5]}


def test_each_step_prints_its_wall_and_cpu_seconds(capsys, monkeypatch):
    """Issue 40: the demo says where its time goes (the summary lists every step)."""
    now = iter([100.0, 102.5, 102.5, 160.0])
    cpu = iter([10.0, 11.0, 11.0, 121.5])
    from bert_tf import demo_steps
    monkeypatch.setattr(demo_steps.time, "time", lambda: next(now))
    monkeypatch.setattr(demo_steps, "cpu_seconds", lambda: next(cpu))
    clock = demo.StepClock()
    clock.start("1/6 learn a vocab")
    clock.start("3/6 pre-train")
    clock.stop()
    clock.stop()  # no step running: nothing
    assert capsys.readouterr().out == ("\n==> 1/6 learn a vocab\n(step 1/6: 2.5 s, CPU 1.0 s)\n"
                                       "\n==> 3/6 pre-train\n(step 3/6: 57.5 s, CPU 110.5 s)\n")
    table = demo.summary([(10, 5.0, 0.1), (20, 4.0, 0.2)], "", [], 60, clock.rows)
    assert table.endswith("step  seconds  CPU seconds\n1/6       2.5          1.0\n"
                          "3/6      57.5        110.5")


def test_export_version_is_found_without_tensorflow(tmp_path):
    for folder in ("bert_demo/3", "bert_demo_encoder/7", "bert_demo_encoder/notes"):
        (tmp_path / folder).mkdir(parents=True)
    code = ("import sys; from bert_tf import demo; "
            f"print(demo._next_version({str(tmp_path)!r}, ['bert_demo', 'bert_demo_encoder', "
            "'bert_demo_x']), 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT), timeout=60).stdout
    assert out.split() == ["8", "False"]


def test_failed_step_is_one_line_error(tmp_path):
    with pytest.raises(demo.BertError, match=r"^bert_tf.tokenization.vocab_builder: step failed \(exit 1\)"):
        demo.run_demo(str(tmp_path / "out"), str(tmp_path / "export"),
                      input_file=str(tmp_path / "missing.txt"))


@pytest.mark.slow
# slow, as tests/test_install.py::test_demo_through_the_installed_wheel (the same run and checks
# through the installed bert-demo; this one runs the checkout's run_demo in process)
def test_demo_end_to_end(tmp_path, capsys):
    export_base = str(tmp_path / "export")
    result = demo.run_demo(str(tmp_path / "out"), export_base, train_steps=150,
                           iterations_per_loop=50, dupe_factor=3)
    printed = capsys.readouterr().out
    assert noisy(printed) == [], noisy(printed)

    # Pre-training learns in this short run too (only the word frequencies: words in context
    # take ~1000 steps, the slow test): the loss falls loop after loop from near ln(V) + ln 2,
    # and the masked-LM accuracy of the last loop and of the eval beats the first loop's.
    losses = result["losses"]
    assert len(losses) == 10, printed  # off TPU a loop is at most a tenth of the run
    thirds = [sum(losses[i:i + 3]) / 3 for i in (0, 3, 7)]  # steps 1-45, 46-90, 106-150
    assert thirds[0] > thirds[1] > thirds[2] and thirds[2] < thirds[0] - 0.3, losses
    first_acc, last_acc = result["progress"][0][2], result["progress"][-1][2]
    eval_acc = float(re.search(r"eval +150 +[0-9.]+ +([0-9.]+)", printed)[1])
    assert min(last_acc, eval_acc) > first_acc, (first_acc, last_acc, eval_acc)

    # Exports in the TF Serving layout, one version for all three, with warm-up requests.
    for name in ("bert_demo", "bert_demo_preprocessor", "bert_demo_encoder"):
        assert os.listdir(os.path.join(export_base, name)) == ["1"]
        assert os.path.exists(os.path.join(export_base, name, "1", "saved_model.pb"))
    assert os.path.getsize(os.path.join(result["fill_mask_dir"], "assets.extra",
                                        "tf_serving_warmup_requests")) > 0

    # The fresh Keras process: k tokens per [MASK], probabilities in order, summing to <= 1.
    vocab = set(vocab_tokens(result["vocab_file"]))
    fill = result["predictions"]["fill_mask"]
    assert [f["text"] for f in fill] == demo.DEMO_SENTENCES
    for f in fill:
        assert len(f["masks"]) == 1
        tokens, scores = f["masks"][0]["tokens"], f["masks"][0]["scores"]
        assert len(tokens) == len(scores) == 5
        assert set(tokens) <= vocab and "[MASK]" not in tokens
        assert all(s >= 0 for s in scores) and scores == sorted(scores, reverse=True)
        assert sum(scores) <= 1 + 1e-6
    emb = result["predictions"]["embeddings"]
    assert emb["shape"] == [6, 128]
    assert all(abs(emb["cosine"][i][i] - 1) < 1e-3 for i in range(6))
    assert len(result["check"]["hits"]) == 5 and len(result["check"]["same"]) == 3

    check_printed_summary(printed, result["progress"], export_base)


@pytest.mark.slow  # the full demo: ~3 minutes on 2 cores
def test_bert_demo_learns_from_an_empty_folder(tmp_path):
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "bert_tf.demo"], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                          timeout=900)
    seconds = time.time() - start
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert noisy(proc.stdout) == [] and noisy(proc.stderr) == [], proc.stderr
    m = re.search(r"right word in the top 5: (\d)/5", proc.stdout)
    assert m and int(m[1]) >= 4, proc.stdout[-3000:]
    m = re.search(r"cosine of same-topic pairs: (.*); of unrelated pairs: (.*)", proc.stdout)
    same = [float(x) for x in m[1].split(", ")]
    cross = [float(x) for x in m[2].split(", ")]
    assert min(same) > max(cross), m[0]
    assert sorted(os.listdir(tmp_path)) == ["demo_out", "export"]
    print(f"bert-demo: {seconds:.0f} s")


def test_a_killed_demo_leaves_no_step_running(tmp_path):
    """A step started as the demo starts them gets SIGTERM when the demo is SIGKILLed."""
    import signal
    import subprocess
    import time
    code = ("import subprocess, sys; from bert_tf import demo; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
            "preexec_fn=demo.step_dies_with_demo); print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    step = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(step, 0)  # still there (or a zombie of init's, reaped soon)
        except ProcessLookupError:
            break
        with open(f"/proc/{step}/stat") as f:
            if f.read().split(") ")[1].startswith("Z"):
                break
        time.sleep(0.05)
    else:
        os.kill(step, signal.SIGKILL)
        pytest.fail("the step outlived the killed demo by 5 s")


def check_printed_summary(printed, progress, export_base):
    """What the demo prints after its steps (also checked on the installed wheel's run,
    tests/test_install.py): the closing summary, each step's seconds, how to serve."""
    # The closing summary: first and last loop, the exports with sizes, what to run next.
    assert [p[0] for p in progress] == list(range(15, 151, 15))
    assert re.search(r"first loop +15 +[0-9.]+ +[0-9.]+\nlast loop +150 ", printed)
    assert re.search(r"bert_demo_encoder/1 +[0-9.]+ MB", printed)
    assert "bert-run-classifier --task_name=mrpc" in printed
    step5 = printed.split("==> 5/6")[1].split("==> 6/6")[0]
    assert "right word in the top 5: " in step5 and '{"' not in step5  # no raw JSON
    # Each step says how long it took, wall and CPU seconds (issue 40), and the summary lists them.
    steps = re.findall(r"\(step (\d)/6: [0-9.]+ s, CPU [0-9.]+ s\)\n", printed)
    assert steps == ["1", "2", "3", "4", "5", "6"], printed
    assert re.search(r"step  seconds  CPU seconds\n(\d/6 +[0-9.]+ +[0-9.]+\n?){6}", printed)
    # What step 6 prints: how to serve this very export.
    assert f"--model_base_path={export_base}/bert_demo" in printed
    assert "fill-mask (top 5 per [MASK]):" in printed
