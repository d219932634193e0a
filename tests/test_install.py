"""The wheel `pip wheel .` builds: its contents, and the demo pipeline from the installed package.

The wheel goes into a fresh venv that sees this project's .venv site-packages (TensorFlow
etc., so nothing is downloaded) but not its editable bert_tf: every command below runs the
installed copy, from a directory outside the checkout.
"""
import email.parser
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from bert_tf import commands, resources
from bert_tf.tokenization import BasicTokenizer

from test_demo import check_printed_summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = ("create_pretraining_data", "run_pretraining", "run_classifier", "run_squad",
           "run_ner", "extract_features", "export_savedmodel", "convert", "pack_pretraining_data")
CONFIGS = ("bert_base", "bert_large", "bert_medium", "bert_mini", "bert_small", "bert_tiny",
           "tiny_test")
SEQ, PREDS = 32, 5


def _check(proc, what):
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc


def _clean_copy(dest):
    """The files a clone of the checkout would have (tracked or committable; no .venv, build/,
    egg-info or caches)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        path = os.path.join(ROOT, name)
        if not os.path.lexists(path):  # deleted, not yet committed
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, name)), exist_ok=True)
        if os.path.islink(path):
            os.symlink(os.readlink(path), os.path.join(dest, name))
        else:
            shutil.copy2(path, os.path.join(dest, name))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """Builds the wheel the README's way, `make wheel`, in a clean copy of the checkout (no
    .venv: the target must not need one)."""
    src = tmp_path_factory.mktemp("wheel") / "clone"
    _clean_copy(str(src))
    assert not (src / ".venv").exists()
    # The target's own choice of Python (python3 on PATH: this one's); offline, the build uses
    # its setuptools instead of downloading one.
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    _check(subprocess.run(["make", "-s", "wheel", "WHEEL_FLAGS=--no-build-isolation --no-index"],
                          cwd=src, env=env, capture_output=True, text=True, timeout=300),
           "make wheel")
    (path,) = (src / "dist").glob("bert_tf-*.whl")
    return str(path)


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh venv with the wheel installed; returns (bin dir, env for its commands)."""
    tmp = tmp_path_factory.mktemp("venv")
    env_dir = tmp / "venv"
    _check(subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)],
                          capture_output=True, text=True, timeout=120), "venv")
    python = str(env_dir / "bin" / "python")
    _check(subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q",
                           "--no-deps", "--no-index", wheel], capture_output=True, text=True,
                          timeout=300), "pip install")
    fresh_site = subprocess.run([python, "-c", "import sysconfig; "
                                 "print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True).stdout.strip()
    # A plain path line: that directory's own .pth files (the editable bert_tf's finder)
    # are not run, so `import bert_tf` finds only the wheel's copy.
    with open(os.path.join(fresh_site, "zz_project_deps.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(CUDA_VISIBLE_DEVICES="", PATH=f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}")
    return str(env_dir / "bin"), env, fresh_site


def _run(venv, cwd, *argv, timeout=300):
    bin_dir, env, _ = venv
    exe = os.path.join(bin_dir, argv[0])
    return subprocess.run([exe, *argv[1:]], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _count_records(path):
    """Records in a TFRecord file, from its framing (length, crc, data, crc)."""
    n, data, pos = 0, open(path, "rb").read(), 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        pos += 12 + length + 4
        n += 1
    assert pos == len(data)
    return n


def test_checkout_paths_are_the_packaged_files():
    """configs/ and tfrecords/sample_corpus.txt of the checkout are the package's files (the
    same files with an editable install; equal bytes when the package is an installed wheel,
    as under `make test-py313`)."""
    import filecmp
    from bert_tf import BertError, resources
    editable = os.path.samefile(os.path.dirname(resources.__file__),
                                os.path.join(ROOT, "bert_tf", "resources"))
    check = os.path.samefile if editable else (lambda a, b: filecmp.cmp(a, b, shallow=False))
    assert resources.config_names() == sorted(CONFIGS)
    for name in CONFIGS:
        assert check(os.path.join(ROOT, "configs", name + ".json"), resources.config_file(name))
    assert check(os.path.join(ROOT, "tfrecords", "sample_corpus.txt"), resources.sample_corpus())
    with pytest.raises(BertError, match="^bert_huge: no such shipped config; one of bert_base, "):
        resources.config_file("bert_huge")
    # The guides the README names are the package's files too (a pip install has them), and
    # every shipped guide is listed.
    for name, (_, _, shown) in resources.GUIDES.items():
        assert check(os.path.join(ROOT, shown), resources.doc_file(name))
    guides_dir = os.path.dirname(resources.doc_file("api"))
    shipped = {f for f in os.listdir(guides_dir) if f.endswith(".md")}
    assert shipped == {f for f, _, _ in resources.GUIDES.values()}
    with pytest.raises(BertError, match="^nope: no such guide; one of install, demo, commands, "
                                        "models, serving, tfrecords, long-runs, tpu, "
                                        "compatibility, benchmarks, api$"):
        resources.doc_file("nope")


def test_guides_print_from_the_package():
    listing = subprocess.run([sys.executable, "-m", "bert_tf.resources"], capture_output=True,
                             text=True, check=True).stdout
    assert [line.split()[0] for line in listing.splitlines()[::2]] == [
        "install", "demo", "commands", "models", "serving", "tfrecords", "long-runs", "tpu",
        "compatibility", "benchmarks", "api"]
    guide = subprocess.run([sys.executable, "-m", "bert_tf.resources", "serving"],
                           capture_output=True, text=True, check=True).stdout
    assert guide.startswith("# Serving bert_tf exports with stock TF Serving")
    bad = subprocess.run([sys.executable, "-m", "bert_tf.resources", "nope"],
                         capture_output=True, text=True)
    assert (bad.returncode, bad.stderr) == (1, "error: nope: no such guide; one of install, "
                                               "demo, commands, models, serving, tfrecords, "
                                               "long-runs, tpu, compatibility, benchmarks, api\n")


def test_wheel_holds_commands_configs_and_corpus(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = z.read(entry_points).decode().split("[console_scripts]")[1]
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = z.read(metadata).decode()
    for name in CONFIGS:
        assert f"bert_tf/resources/configs/{name}.json" in names
    assert "bert_tf/resources/sample_corpus.txt" in names
    assert {f"bert_tf/resources/docs/{f}" for f, _, _ in resources.GUIDES.values()} <= names
    assert {f"bert_tf/commands/{m}.py" for m in MODULES} <= names
    assert "bert_tf/demo_predict.py" in names
    # every package of the checkout (a new one, e.g. bert_tf/pretraining/, too)
    packages = {os.path.relpath(d, ROOT).replace(os.sep, "/") + "/__init__.py"
                for d, _, files in os.walk(os.path.join(ROOT, "bert_tf")) if "__init__.py" in files}
    assert packages and packages <= names, sorted(packages - names)
    got = dict(line.split(" = ") for line in scripts.strip().splitlines())
    assert got == {name: f"{module}:main" for name, module in commands.COMMANDS.items()}
    assert len(got) == 10
    meta = email.parser.Parser().parsestr(meta)
    assert SpecifierSet(meta["Requires-Python"]) == SpecifierSet(">=3.10,<3.14")
    requires = {r.name: r.specifier for r in map(Requirement, meta.get_all("Requires-Dist"))
                if not r.marker}
    assert requires["tensorflow"] == SpecifierSet(">=2.20,<2.21")
    assert requires["tensorflow-text"] == SpecifierSet(">=2.20,<2.21")
    assert requires["tensorflow-serving-api"] == SpecifierSet(">=2.20,<2.21")
    assert not [n for n, spec in requires.items() if "==" in str(spec)]  # pins: constraints.txt


@pytest.mark.slow
# slow, as the demo below, which runs the same commands from the installed package (4 exports
# with warm-up requests, a fresh process without bert_tf loads them)
def test_pipeline_through_the_installed_commands(venv, tmp_path):
    bin_dir, env, fresh_site = venv
    work = tmp_path / "work"  # outside the checkout
    work.mkdir()
    where = _check(_run(venv, work, "python", "-c", textwrap.dedent("""
        import json, bert_tf, bert_tf.commands
        from bert_tf import resources
        print(json.dumps([bert_tf.__file__, resources.sample_corpus(),
                          resources.config_file("tiny_test")]))
    """)), "import").stdout
    pkg, corpus, config = json.loads(where.strip().splitlines()[-1])
    for path in (pkg, corpus, config):
        assert path.startswith(fresh_site + os.sep), path  # the wheel's copy, not the checkout

    # ~10 lines: the start of the shipped corpus's first two documents.
    docs = open(corpus, encoding="utf-8").read().split("\n\n")
    (work / "corpus.txt").write_text("\n".join(docs[0].splitlines()[:5]) + "\n\n"
                                     + "\n".join(docs[1].splitlines()[:5]) + "\n")
    # Every word is a token (the vocab builder would import TF: 10 s more on 2 busy cores).
    words = {w for line in (work / "corpus.txt").read_text().splitlines()
             for w in BasicTokenizer(do_lower_case=True).tokenize(line)}
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(words)
    (work / "vocab.txt").write_text("\n".join(vocab) + "\n")
    vocab_size = len(vocab)

    proc = _check(_run(venv, work, "bert-create-pretraining-data", "--input_file=corpus.txt",
                       "--output_file=train.tfrecord", "--vocab_file=vocab.txt",
                       f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PREDS}",
                       "--dupe_factor=3", "--random_seed=7"), "bert-create-pretraining-data")
    records = _count_records(work / "train.tfrecord")
    assert records >= 6
    assert re.search(rf"wrote {records} instances .* from 2 documents to 1 file", proc.stderr)

    cfg = json.load(open(config))
    cfg["vocab_size"] = vocab_size
    (work / "bert_config.json").write_text(json.dumps(cfg))
    proc = _check(_run(venv, work, "bert-run-pretraining", "--bert_config_file=bert_config.json",
                       "--input_file=train.tfrecord", "--output_dir=out", "--do_train",
                       f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PREDS}",
                       "--train_batch_size=4", "--num_train_steps=4", "--num_warmup_steps=1",
                       "--iterations_per_loop=2", "--save_checkpoints_steps=4",
                       "--vocab_file=vocab.txt", "--export_dir=export", "--model_name=tiny",
                       "--noprogress"), "bert-run-pretraining")
    losses = [float(x) for x in re.findall(r"step \d+/4 loss=([0-9.]+)", proc.stderr)]
    # off TPU a loop is at most a tenth of the run: 4 steps, 4 lines (--iterations_per_loop=2
    # still bounds it on a TPU)
    assert len(losses) == 4 and all(0 < x < 20 for x in losses), proc.stderr[-2000:]
    for name in ("tiny", "tiny_embeddings", "tiny_preprocessor", "tiny_encoder"):
        assert os.listdir(work / "export" / name) == ["1"]
        assert (work / "export" / name / "1" / "saved_model.pb").exists()
        assert (work / "export" / name / "1" / "assets.extra" / "tf_serving_warmup_requests"
                ).stat().st_size > 0

    # A fresh process (plain Keras, no bert_tf import) runs the text-in exports.
    load = textwrap.dedent("""
        import json, sys, keras, tensorflow as tf, tensorflow_text
        texts = tf.constant(["the lighthouse [MASK] built .", "oxen dragged each block ."])
        fill = keras.layers.TFSMLayer("export/tiny/1", call_endpoint="serving_default")(texts)
        pre = keras.layers.TFSMLayer("export/tiny_preprocessor/1", call_endpoint="__call__")
        enc = keras.layers.TFSMLayer("export/tiny_encoder/1", call_endpoint="__call__")
        out = enc(pre(texts))
        print(json.dumps({"bert_tf": "bert_tf" in sys.modules,
                          "mask_count": fill["mask_count"].numpy().tolist(),
                          "top_k": list(fill["top_k_tokens"].shape),
                          "pooled": list(out["pooled_output"].shape),
                          "sequence": list(out["sequence_output"].shape)}))
    """)
    got = json.loads(_check(_run(venv, work, "python", "-c", load), "load").stdout.splitlines()[-1])
    hidden = cfg["hidden_size"]
    assert got["bert_tf"] is False
    assert got["mask_count"] == [1, 0] and got["top_k"][0] == 2 and got["top_k"][-1] == 5
    assert got["pooled"] == [2, hidden] and got["sequence"] == [2, SEQ, hidden]


# Run in every process the demo starts (PYTHONPATH): at exit, which bert_tf it imported, if any.
_IMPORT_PROBE = textwrap.dedent("""
    import atexit, json, os, sys

    def _record():
        mod = sys.modules.get("bert_tf")
        with open(os.path.join(os.environ["BERT_TF_IMPORT_PROBE"], f"{os.getpid()}.json"),
                  "w") as f:
            json.dump([sys.argv[0], mod and mod.__file__], f)

    atexit.register(_record)
""")


# slow: five processes, ~70 CPU-s (`make test-py313` runs it too). The default suite keeps the
# wheel's contents (test_wheel_holds_commands_configs_and_corpus) and six console scripts
# starting from the installed wheel (test_commands_help_from_the_installed_wheel); the demo's
# steps run from the checkout in their own tests (data, pre-training, exports, a fresh-process
# load). The demo itself, and bert_tf/demo_predict.py, run in slow tests only.
@pytest.mark.slow
def test_demo_through_the_installed_wheel(venv, tmp_path):
    """The installed `bert-demo`, from a folder outside the checkout, with the small settings:
    the wheel's package, corpus and config; pre-training learns; the four exports in the TF
    Serving layout with warm-up requests; a fresh process (no bert_tf) predicts from them.
    (In full, from an empty folder, with the learning criteria: test_demo's slow test.)"""
    from bert_tf import demo
    from bert_tf.tokenization import vocab_tokens
    from test_quiet import noisy

    bin_dir, env, fresh_site = venv
    work = tmp_path / "work"  # outside the checkout
    work.mkdir()
    where = _check(_run(venv, work, "python", "-c", textwrap.dedent("""
        import json, bert_tf, bert_tf.demo
        from bert_tf import resources
        print(json.dumps([bert_tf.__file__, resources.sample_corpus(),
                          resources.config_file("bert_tiny"), bert_tf.demo.SAMPLE_CORPUS,
                          bert_tf.demo.TINY_CONFIG]))
    """)), "import").stdout
    pkg, corpus, config, demo_corpus, demo_config = json.loads(where.strip().splitlines()[-1])
    for path in (pkg, corpus, config):
        assert path.startswith(fresh_site + os.sep), path  # the wheel's copy, not the checkout
    assert (demo_corpus, demo_config) == (corpus, config)

    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(_IMPORT_PROBE)
    run_env = dict(env, PYTHONPATH=str(probe), BERT_TF_IMPORT_PROBE=str(probe))
    proc = subprocess.run(
        [os.path.join(bin_dir, "bert-demo"), "--output_dir=demo_out", "--export_base=export",
         "--train_steps=150", "--iterations_per_loop=50", "--dupe_factor=3"],
        cwd=work, env=run_env, capture_output=True, text=True, timeout=900)
    printed = proc.stdout
    assert proc.returncode == 0, printed[-3000:] + proc.stderr[-3000:]
    assert noisy(printed) == [] and noisy(proc.stderr) == [], noisy(printed + proc.stderr)
    assert sorted(os.listdir(work)) == ["demo_out", "export"]
    out, export_base = work / "demo_out", str(work / "export")

    # Every step ran the wheel's bert_tf (the demo as the installed console script), on the
    # wheel's corpus; step 5's fresh process imported no bert_tf at all.
    runs = [json.load(open(probe / f)) for f in os.listdir(probe) if f.endswith(".json")]
    assert [m for _, m in runs if m and not m.startswith(fresh_site + os.sep)] == [], runs
    (demo_run,) = [m for argv0, m in runs if os.path.basename(argv0) == "bert-demo"]
    assert demo_run == pkg
    assert [m for argv0, m in runs if argv0.endswith("demo_predict.py")] == [None], runs
    assert printed.count(f"--input_file={corpus} ") == 2  # vocab builder, create-pretraining-data
    # The model is the wheel's bert_tiny.json with the learned vocab's size and no dropout.
    cfg, tiny = json.load(open(out / "bert_config.json")), json.load(open(config))
    vocab = vocab_tokens(str(out / "vocab.txt"))
    assert cfg["vocab_size"] == len(vocab)
    assert cfg["hidden_dropout_prob"] == cfg["attention_probs_dropout_prob"] == 0
    changed = ("vocab_size", "hidden_dropout_prob", "attention_probs_dropout_prob")
    assert {k: v for k, v in cfg.items() if k not in changed} == \
        {k: v for k, v in tiny.items() if k not in changed}

    # bert-create-pretraining-data: every instance it reports is in its two shards.
    m = re.search(r"wrote (\d+) instances .* from 11 documents to 2 file\(s\)", printed)
    assert m, printed[-3000:]
    shards = sorted((out / "tfrecords").glob("train-*-of-2.tfrecord"))
    assert len(shards) == 2 and sum(map(_count_records, shards)) == int(m[1]) > 0

    # Pre-training learns in this short run too (only the word frequencies: words in context
    # take ~1000 steps, the slow test): the loss falls loop after loop from near ln(V) + ln 2,
    # and the masked-LM accuracy of the last loop and of the eval beats the first loop's.
    train_log = (out / "pretraining.log").read_text()
    losses, progress = demo.parse_losses(train_log), demo.parse_progress(train_log)
    assert len(losses) == 10, printed  # off TPU a loop is at most a tenth of the run
    assert all(0 < x < 20 for x in losses), losses
    thirds = [sum(losses[i:i + 3]) / 3 for i in (0, 3, 7)]  # steps 1-45, 46-90, 106-150
    assert thirds[0] > thirds[1] > thirds[2] and thirds[2] < thirds[0] - 0.3, losses
    first_acc, last_acc = progress[0][2], progress[-1][2]
    eval_acc = float(re.search(r"eval +150 +[0-9.]+ +([0-9.]+)", printed)[1])
    assert min(last_acc, eval_acc) > first_acc, (first_acc, last_acc, eval_acc)

    # Exports in the TF Serving layout, one version for all four, with warm-up requests.
    for name in ("bert_demo", "bert_demo_embeddings", "bert_demo_preprocessor",
                 "bert_demo_encoder"):
        assert os.listdir(os.path.join(export_base, name)) == ["1"]
        assert os.path.exists(os.path.join(export_base, name, "1", "saved_model.pb"))
        assert os.path.getsize(os.path.join(export_base, name, "1", "assets.extra",
                                            "tf_serving_warmup_requests")) > 0

    # The fresh Keras process: k tokens per [MASK], probabilities in order, summing to <= 1.
    predictions = json.load(open(out / "predictions.json"))
    fill = predictions["fill_mask"]
    assert [f["text"] for f in fill] == demo.DEMO_SENTENCES
    for f in fill:
        assert len(f["masks"]) == 1
        tokens, scores = f["masks"][0]["tokens"], f["masks"][0]["scores"]
        assert len(tokens) == len(scores) == 5
        assert set(tokens) <= set(vocab) and "[MASK]" not in tokens
        assert all(s >= 0 for s in scores) and scores == sorted(scores, reverse=True)
        assert sum(scores) <= 1 + 1e-6
    emb = predictions["embeddings"]
    assert emb["shape"] == [6, cfg["hidden_size"]] == [6, 128]
    assert all(abs(emb["cosine"][i][i] - 1) < 1e-3 for i in range(6))
    check = demo.check_predictions(predictions)
    assert len(check["hits"]) == 5 and len(check["same"]) == 3
    assert f"right word in the top 5: {sum(check['hits'])}/5 (" in printed

    check_printed_summary(printed, progress, export_base)  # as test_demo checks run_demo's
    assert re.search(r"export/bert_demo_encoder/1 +[0-9.]+ MB", printed)


def test_commands_help_from_the_installed_wheel(venv, tmp_path):
    for command, flag in (("bert-demo", "--train_steps"), ("bert-convert", "--source"),
                          ("bert-create-pretraining-data", "--masked_lm_prob"),
                          ("bert-run-pretraining", "--num_train_steps"),
                          ("bert-export-savedmodel", "--export_base")):
        proc = _check(_run(venv, tmp_path, command, "--help"), command)
        assert flag in proc.stdout, (command, proc.stdout[:2000])
    proc = _run(venv, tmp_path, "bert-run-ner", "--bogus_flag=1")
    assert (proc.returncode, proc.stderr.strip()) == (1, "error: Unknown command line flag "
                                                         "'bogus_flag'")
    assert os.listdir(tmp_path) == []  # --help wrote nothing
