"""Shared pytest fixtures.

The host CPU is split into two logical devices before anything initialises TensorFlow, so that
MirroredStrategy can be tested with two replicas on a CPU-only machine (other tests keep using
/CPU:0 as before).
"""
import atexit
import glob
import os
import shutil
import tempfile

import numpy as np
import pytest

# The tokenizer probe cache of this test session, set before anything probes: tests never write
# into the user's ~/.cache. Made by the session's first process (xdist's controller), whose
# workers and subprocesses inherit it: the probes (~4 s) run once, not once per worker.
if "BERT_TF_TEST_CACHE" not in os.environ or "PYTEST_XDIST_WORKER" not in os.environ:
    # Not an xdist worker: a folder of its own (one leaked from a shell is not reused).
    os.environ["BERT_TF_TEST_CACHE"] = tempfile.mkdtemp(prefix="bert_tf_test_cache-")
    atexit.register(shutil.rmtree, os.environ["BERT_TF_TEST_CACHE"], True)
os.environ["BERT_TF_CACHE"] = os.environ["BERT_TF_TEST_CACHE"]

import bert_tf  # noqa: E402,F401  (sets KERAS_BACKEND before keras is imported)

TWO_CPUS = False  # set by pytest_configure, before any test module imports TensorFlow


def pytest_configure(config):
    """Splits the CPU and turns tf.data's autotune off in the processes that run tests.
    xdist's controller runs none: it does not start TensorFlow (~6 s on one core before the
    workers even spawn)."""
    global TWO_CPUS
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        return
    from bert_tf.training.distribute import split_cpu
    TWO_CPUS = split_cpu(2)
    _tf_data_autotune_off()


def _tf_data_autotune_off():
    """Every tf.data iterator made in this process runs without autotune, through the hook
    that TF's own debug mode uses to turn it off (iterators, multi-device iterators, reduce).

    Why: destroying an autotuned iterator likely joins its autotune thread and can wait out
    that thread's sleep; iterators die when the garbage collector gets to them, so whichever
    test runs then sits idle for tens of seconds. Results do not depend on autotune (it sizes
    buffers and parallelism; map order stays deterministic), but a bug that shows only with
    autotune on would not show here. Commands that tests start as processes keep it on."""
    import functools
    import tensorflow as tf
    from tensorflow.python.data.ops import dataset_ops
    apply = dataset_ops.DatasetV2._apply_debug_options
    if getattr(apply, "autotune_off", False):
        return
    options = tf.data.Options()
    options.autotune.enabled = False

    @functools.wraps(apply)
    def apply_without_autotune(self):
        return apply(self).with_options(options)
    apply_without_autotune.autotune_off = True
    dataset_ops.DatasetV2._apply_debug_options = apply_without_autotune


# Seconds per file (default suite, 2 cores, a fresh clone without the peers as CI has it,
# tf.data autotune off, 2026-11-30, the 30 longest). Files run longest first, so that `make
# test`'s two workers (one file each at a time) do not end with one long file on one worker
# while the other idles; within a file the order is unchanged.
FILE_SECONDS = {
    "test_export.py": 111, "test_training.py": 93, "test_real_length_training.py": 90,
    "test_tasks_learn.py": 68, "test_two_phase.py": 67, "test_serve_path.py": 66,
    "test_doc_blocks.py": 62, "test_text_graph.py": 54, "test_packed_training.py": 52,
    "test_docs.py": 44, "test_convert_cli.py": 41, "test_real_length_serving.py": 41,
    "test_untrusted_sources.py": 39, "test_formats.py": 38, "test_real_length_policy.py": 38,
    "test_multi_worker.py": 34, "test_input_pipeline.py": 31, "test_bf16.py": 31,
    "test_tfhub_dropin.py": 28, "test_pretrained.py": 27, "test_tasks_e2e.py": 26,
    "test_labels.py": 22, "test_xla.py": 20, "test_install.py": 19, "test_embeddings.py": 18,
    "test_trainer.py": 18, "test_export_serving.py": 17, "test_model.py": 17,
    "test_packed_schema.py": 17, "test_packing_data.py": 15,
}


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: -FILE_SECONDS.get(item.path.name, 0))  # stable sort


# ---- pre-training data --------------------------------------------------------------------

# Token ids of the synthetic pre-training vocabulary.
PAD_ID, CLS_ID, SEP_ID, MASK_ID, FIRST_WORD_ID = 0, 1, 2, 3, 4


def make_pretraining_instance(rng, seq_len, max_pred, vocab_size, min_len=None):
    """One padded instance with learnable structure (a dict of the record's features).

    Each segment repeats one word; segment B repeats A's word (label 0, "actual next") or another
    one (label 1, "random next"). Masked tokens are predictable from their segment, NSP from
    comparing the two segments' words.
    """
    words = vocab_size - FIRST_WORD_ID
    total = int(rng.integers(min_len or seq_len // 2, seq_len + 1))
    n_a = int(rng.integers(2, total - 4))
    n_b = total - 3 - n_a
    word_a = int(rng.integers(words))
    is_random = bool(rng.integers(2))
    word_b = (word_a + int(rng.integers(1, words))) % words if is_random else word_a
    a = [word_a + FIRST_WORD_ID] * n_a
    b = [word_b + FIRST_WORD_ID] * n_b
    ids = [CLS_ID] + a + [SEP_ID] + b + [SEP_ID]
    segs = [0] * (n_a + 2) + [1] * (n_b + 1)
    cand = [i for i, t in enumerate(ids) if t not in (CLS_ID, SEP_ID)]
    n_pred = min(max_pred, max(1, int(round(len(cand) * 0.15))))
    pos = sorted(rng.choice(cand, size=n_pred, replace=False).tolist())
    labels = [ids[p] for p in pos]
    masked = list(ids)
    for p in pos:
        masked[p] = MASK_ID
    pad, ppad = seq_len - total, max_pred - n_pred
    return {"input_ids": masked + [0] * pad, "input_mask": [1] * total + [0] * pad,
            "segment_ids": segs + [0] * pad, "masked_lm_positions": pos + [0] * ppad,
            "masked_lm_ids": labels + [0] * ppad,
            "masked_lm_weights": [1.0] * n_pred + [0.0] * ppad,
            "next_sentence_labels": [int(is_random)]}


def write_pretraining_records(path, num_examples, seq_len=32, max_pred=5, vocab_size=64,
                              seed=0, min_len=None):
    """Write `num_examples` synthetic instances to one TFRecord file; returns their features."""
    import tensorflow as tf
    rng = np.random.default_rng(seed)
    out = []
    with tf.io.TFRecordWriter(str(path)) as w:
        for _ in range(num_examples):
            f = make_pretraining_instance(rng, seq_len, max_pred, vocab_size, min_len)
            feature = {k: (tf.train.Feature(float_list=tf.train.FloatList(value=v))
                           if k == "masked_lm_weights" else
                           tf.train.Feature(int64_list=tf.train.Int64List(value=v)))
                       for k, v in f.items()}
            ex = tf.train.Example(features=tf.train.Features(feature=feature))
            w.write(ex.SerializeToString())
            out.append(f)
    return out


def scalar_summaries(folder):
    """{tag: [(step, value), ...]} in file order, from the one TensorBoard events file directly
    in `folder` (a second one fails the test)."""
    import tensorflow as tf
    files = glob.glob(os.path.join(str(folder), "events.out.tfevents.*"))
    assert len(files) == 1, files
    scalars = {}
    for event in tf.compat.v1.train.summary_iterator(files[0]):
        for v in event.summary.value:
            scalars.setdefault(v.tag, []).append((event.step, float(tf.make_ndarray(v.tensor))))
    return scalars


@pytest.fixture(autouse=True, scope="module")
def _peers_installed(request):
    """A peers test module whose imports failed (its PEER_ERROR) fails every test, never skips:
    the default run deselects the `peers` marker, `make test-peers` must not pass silently."""
    error = getattr(request.module, "PEER_ERROR", None)
    if error is not None:
        pytest.fail(f"peer not installed ({error}): run `make peers`", pytrace=False)


@pytest.fixture
def pretraining_records(tmp_path):
    """Two synthetic shards (seq 32, 5 predictions, vocab 64): (glob pattern, features)."""
    feats = []
    for i in range(2):
        feats += write_pretraining_records(tmp_path / f"shard-{i}.tfrecord", 96, seed=i)
    return str(tmp_path / "shard-*.tfrecord"), feats


def task_models(vocab_size, seed):
    """One tiny model per export task ("embeddings" shares the classifier), seeded."""
    import keras
    from bert_tf.modeling import encoder as be
    from bert_tf.modeling import models as bm
    cfg = tiny_bert_config(vocab_size=vocab_size)
    keras.utils.set_random_seed(seed)
    enc = lambda: be.BertEncoder.from_bert_config(cfg)  # noqa: E731
    models = {"fill_mask": bm.build_model(bm.BertPretrainer(enc())),
              "classification": bm.build_model(bm.BertClassifier(enc(), 3)),
              "regression": bm.build_model(bm.BertClassifier(enc(), 1)),
              "span": bm.build_model(bm.BertSpanLabeler(enc())),
              "tagging": bm.build_model(bm.BertTokenClassifier(enc(), 4))}
    models["embeddings"] = models["classification"]
    return models


def tiny_bert_config(dropout=0.0, vocab_size=64, **overrides):
    """A 2-layer, hidden-32 BertConfig for fast CPU tests."""
    from bert_tf.modeling.config import BertConfig
    args = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                type_vocab_size=2, hidden_dropout_prob=dropout,
                attention_probs_dropout_prob=dropout)
    args.update(overrides)
    return BertConfig(**args)


@pytest.fixture
def tiny_config():
    return tiny_bert_config()


# ---- bert-run-pretraining (run_pretraining.py) in a child process --------------------------

_RUN_PRETRAINING_DRIVER = (
    "import sys, json\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "if sys.argv[3] == 'split':\n"
    "    from bert_tf.training.distribute import split_cpu\n"
    "    split_cpu(2)\n"
    "from bert_tf.commands import run_pretraining as rp\n"
    "rp.define_flags()\n"
    "out = {}\n"
    "for name, argv in json.loads(sys.argv[2]).items():\n"
    "    rp.FLAGS.unparse_flags()\n"
    "    rp.FLAGS(['run_pretraining.py'] + argv)\n"
    "    try:\n"
    "        rp.app_main([])\n"
    "        out[name] = 'no error'\n"
    "    except SystemExit as e:\n"
    "        out[name] = e.code\n"
    "print(json.dumps(out))\n")


def run_pretraining_cases(cases, cwd, split_cpus=False):
    """Runs bert-run-pretraining's main once per {name: argv} in ONE child process (TF starts
    once); returns ({name: "no error" or the SystemExit code, e.g. "error: ..."}, stdout)."""
    import json
    import os
    import subprocess
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run([sys.executable, "-c", _RUN_PRETRAINING_DRIVER, repo, json.dumps(cases),
                          "split" if split_cpus else "one"],
                         capture_output=True, text=True, cwd=cwd, timeout=300,
                         env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1]), res.stdout


def run_export_savedmodel(argv, app_main=False):
    """bert-export-savedmodel's run() in this process (its absl flags defined once, reset
    before and after): the export a test needs without a TensorFlow start-up of its own.
    Returns run()'s result (the export folder); app_main=True: the command's app_main instead
    (its `exported <path>` line printed, a BertError its SystemExit), returning None."""
    from absl import flags
    from bert_tf.commands import export_savedmodel
    if "kind" not in flags.FLAGS:
        export_savedmodel.define_flags()
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["bert-export-savedmodel", *argv])
    try:
        return export_savedmodel.app_main([]) if app_main else export_savedmodel.run()
    finally:
        flags.FLAGS.unparse_flags()


def original_pack(a, b, seq_length, cls=101, sep=102):
    """The original's convert_single_example packing of token ids, written from its rules:
    (input_ids, input_mask, segment_ids) lists; with b, pop from the longer side until
    [CLS] a [SEP] b [SEP] fits; an empty or missing b is a single segment."""
    a = list(a)
    b = list(b) if b is not None else []
    if b:
        while len(a) + len(b) > seq_length - 3:
            (a if len(a) > len(b) else b).pop()
        ids = [cls] + a + [sep] + b + [sep]
        types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    else:
        ids = [cls] + a[:seq_length - 2] + [sep]
        types = [0] * len(ids)
    pad = seq_length - len(ids)
    return ids + [0] * pad, [1] * len(ids) + [0] * pad, types + [0] * pad
