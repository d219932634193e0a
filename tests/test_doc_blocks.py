"""Every code block of README.md and of the shipped guides (bert_tf/resources/docs/*.md, read
through their checkout symlinks: docs/*.md, export/README.md, tfrecords/README.md) runs as
written (issue 27), in one prepared working directory (the "world") that holds tiny stand-ins
for what the blocks name: an original release `uncased_L-12_H-768_A-12/` (= `$BERT`,
`$BERT_BASE_DIR`) with the tiny config and a TF1 checkpoint, a Hugging Face directory,
`configs/bert_base.json` (tiny), corpus / GLUE / SQuAD / CoNLL files, the exports the Python
blocks load, and the top-level scripts, so `python run_pretraining.py ...` runs as printed.

How a block runs is its language: `sh` (and indented blocks) with `bash -e` in the world,
`python` as a fresh `python -` process in the world (so `import bert_tf` is all a block gets),
`yaml` parsed.
New blocks are picked up by themselves. A block that cannot run here goes in SKIP with the
reason (PEERS: needs `make peers`; SLOW: long; CHECKS: what to assert after it), named by its
doc and a piece of its first line (where first lines repeat, a piece from the first line on,
across its line break); an entry that names no block fails, so the tables cannot go stale. A
SLOW entry names, in its comment, the default test that runs what the block shows; on a
skipped `curl ... :predict` block it marks the block's REST body test. docs/API.md's python
blocks are one program and run in tests/test_docs.py.

The one rewrite: `/tmp/...` output folders become `tmp/...` inside the world (REWRITES).

The shipped guides are read by pip users without a checkout: none names a checkout path
(`.venv/`, `tests/`, `tfrecords/*.py`, a `make` target) outside a region marked
`<!-- checkout-only -->` ... `<!-- /checkout-only -->` (issue 34).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# In reading order (the order the blocks run in: later blocks may use what earlier ones wrote;
# docs/models.md's continued pre-training reads data/train*, which docs/long_runs.md's data step
# then adds shards to).
DOCS = ("README.md", "docs/install.md", "docs/demo.md", "docs/commands.md", "docs/models.md",
        "export/README.md", "tfrecords/README.md", "docs/long_runs.md", "docs/tpu.md",
        "docs/compatibility.md", "docs/benchmarks.md", "docs/API.md")
GUIDES_DIR = os.path.join(ROOT, "bert_tf", "resources", "docs")
ONE_PROGRAM = {"docs/API.md"}  # its python blocks: tests/test_docs.py, in order, one namespace
RELEASE = "uncased_L-12_H-768_A-12"

# (doc, text in the block's first line): why it does not run here.
SKIP = {
    ("README.md", "pip install ."): "pip builds the package (network for build deps); the "
                                    "bert-demo it then runs is tests/test_demo.py",
    ("docs/install.md", "pip install ."): "pip builds the package (network for build deps); "
                                          "the bert-demo it then runs is tests/test_demo.py",
    ("docs/install.md", 'pip install "bert_tf[beam]"'): "pip: network, and it would change the "
                                                        "test's own environment",
    ("README.md", "make demo"): "`make test` is what runs this file; `make demo` is "
                                "tests/test_demo.py",
    ("docs/install.md", "make demo"): "`make test` is what runs this file; `make demo` is "
                                      "tests/test_demo.py; `make docs` is tests/test_docs_site.py",
    ("README.md", "docker run"): "docker + a TF Serving server",
    ("docs/models.md", "docker run"): "docker + a TF Serving server",
    ("docs/tpu.md", "python create_pretraining_data.py --input_file='corpus/*.txt' \\"):
        "Cloud TPU: gsutil, gs://, --use_tpu",
    ("docs/long_runs.md", "while true; do"): "a template: gs:// output, elided flags (`...`)",
    ("export/README.md", "docker run"): "docker + a TF Serving server",
    ("export/README.md", "tensorflow_model_server"): "the TF Serving binary",
    ("export/README.md", "curl -s localhost:8501"): "REST to a running TF Serving server "
                                                  "(bodies: test_rest_bodies_run_on_the_exports)",
    ("export/README.md", "import grpc"): "gRPC to a running TF Serving server",
    ("tfrecords/README.md", "create_pretraining_data.py --runner=DataflowRunner"):
        "Dataflow (Google Cloud)",
}
# Blocks that need the peer packages (`make peers`): marked `peers`, run by `make test-peers`.
PEERS = {("export/README.md", "import tensorflow as tf, tensorflow_hub as hub")}
# Blocks that take long: marked `slow` (`make test-all`).
SLOW = {
    ("docs/commands.md", "# A vocab, if you have none"),  # the tour: 8 commands, ~2 min
    ("docs/models.md", "bert-run-pretraining --init_checkpoint=bert-base-uncased-hf/"),  # ~30 s
    ("README.md", "BERT=uncased_L-12_H-768_A-12"),  # fine-tunes and exports: ~30 s
    ("README.md", "bert-create-pretraining-data --input_file='corpus/*"),  # + 4 exports: ~40 s
    ("README.md", "bert-pack-pretraining-data"),  # packs the block above's records: ~25 s
    # two phases in one command, ~30 s; tests/test_two_phase.py runs the same recipe
    ("docs/long_runs.md", "bert-run-pretraining --bert_config_file=uncased_L-12_H-768_A-12/"),
    # slow: tests/test_serve_path.py::test_fit_export_serve (the same Hugging Face text
    # classifier, fit) and tests/test_docs.py::test_api_examples_run (API.md block 5:
    # from_pretrained of a release directory, a text classifier's fit / predict / save .keras)
    ("docs/models.md", "import bert_tf"),
    # slow: tests/test_export.py::test_keras_classifier_on_loaded_preprocessor_and_encoder_
    # trains (keras.Input -> the loaded preprocessor -> the loaded encoder -> keras.Model, on
    # text); the demo's own step 5 (bert_tf/demo_predict.py: this block's TFSMLayer pair on
    # the demo's exports) in the slow tests/test_install.py::test_demo_through_the_installed_wheel
    ("docs/models.md", "import keras, tensorflow as tf, tensorflow_text"),
    # slow: tests/test_embeddings.py::test_mean_pooling_and_normalize_from_the_sentence_
    # transformers_files (from_pretrained(task="embeddings", text_input=True) of a Hugging Face
    # directory, predict, export)
    ("README.md", "import bert_tf\nemb = bert_tf.from_pretrained"),
    # slow: test_rest_body[export/README.md:104] (the same export loaded with
    # tf.saved_model.load, its serving_default called with text=)
    ("export/README.md", 'noqa: F401\nm = tf.saved_model.load("models/bert_fill_mask/1")'),
    # slow: tests/test_export.py::test_fresh_process_matches_in_memory_models (the preprocessor
    # and encoder exports loaded with tf.saved_model.load in a fresh process: the encoder's
    # sequence_output is exactly 0.0 at padding, so the unmasked mean is the masked one scaled)
    ("export/README.md", "import tensorflow as tf, tensorflow_text  # noqa: F401\npreprocess"),
    # slow: tests/test_export.py::test_stock_tfsmlayer_and_rebuilt_keras_model (stock TFSMLayer
    # with its default endpoint on an end-to-end export, and with a named call_endpoint)
    ("export/README.md", "import keras, tensorflow as tf, tensorflow_text"),
    # slow: tests/test_export.py::test_keras_classifier_on_loaded_preprocessor_and_encoder_trains
    # (the same load_as_keras_layer pair, trainable encoder, Dense head on keras.Input; trained)
    ("export/README.md", "import keras\nfrom bert_tf.export import load_as_keras_layer"),
    # slow: tests/test_export_serving.py::test_export_script_from_original_tf1_checkpoint (this
    # command's run() on an original release's TF1 checkpoint into <export_base>/<model_name>/1;
    # the script as a process: test_export_script_errors_are_one_line there, and to a
    # successful export tests/test_serve_path.py::test_export_savedmodel_takes_a_keras_file;
    # the fill_mask export itself: the world's, export_for_serving, which the layout and REST
    # body tests read)
    ("export/README.md", "bert-export-savedmodel --bert_config_file"),
    # slow: tests/test_serve_path.py::test_fit_export_serve (its fixture: from_pretrained of a
    # Hugging Face directory, task="classification", text_input, fit on a list of strings,
    # export to models/clf/1)
    ("README.md", "import bert_tf\nclf = bert_tf.from_pretrained"),
    # (the REST body of README.md's curl, on the export the block above writes) slow:
    # test_rest_body[export/README.md:114] (a row-format body of strings on a classification
    # export's serving_default)
    ("README.md", "docker run --rm -p 8501:8501 -v \"$PWD/models/clf"),
}
# A block that does this never runs unless SKIP names it (it would reach out of the test, or
# change the environment the tests run in).
OUTSIDE = re.compile(r"\b(pip3? install|docker|gsutil|curl|sudo|apt(-get)?|gcloud|kubectl)\b"
                     r"|--use_tpu=[Tt]rue|gs://|grpc\.insecure_channel")
# Output folders the blocks name under /tmp are kept inside the world.
REWRITES = [(re.compile(r"(?<![\w./])/tmp/"), "tmp/")]


# ---- the blocks ---------------------------------------------------------------------------

class Block:
    def __init__(self, doc, lang, lineno, text):
        self.doc, self.lang, self.lineno, self.text = doc, lang, lineno, text
        self.first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")

    @property
    def id(self):
        return f"{self.doc}:{self.lineno}"

    def named(self, table):
        """The keys of `table` that name this block: (doc, text in its first line), or where
        first lines repeat, (doc, text from its first line on, across the line break)."""
        return [key for key in table if key[0] == self.doc and (
            key[1] in self.first if "\n" not in key[1] else
            key[1].split("\n")[0] in self.first and key[1] in self.text)]

    def __repr__(self):
        return f"{self.doc} line {self.lineno} ({self.lang or 'unlabelled'}: {self.first!r})"


def doc_blocks(doc):
    """Fenced blocks (```lang) and indented (4-space) blocks after a blank line."""
    lines = open(os.path.join(ROOT, doc), encoding="utf-8").read().splitlines()
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)\s*$", lines[i])
        if fence:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append(Block(doc, fence.group(1), i + 2, "\n".join(lines[i + 1:j]) + "\n"))
            i = j + 1
            continue
        if lines[i].startswith("    ") and i > 0 and not lines[i - 1].strip():
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or
                                      (not lines[j].strip() and j + 1 < len(lines)
                                       and lines[j + 1].startswith("    "))):
                j += 1
            out.append(Block(doc, "", i + 1, "\n".join(ln[4:] for ln in lines[i:j]) + "\n"))
            i = j
            continue
        i += 1
    return out


ALL_BLOCKS = [b for doc in DOCS for b in doc_blocks(doc)]


def _params(langs):
    params = []
    for b in ALL_BLOCKS:
        if b.lang not in langs or (b.doc in ONE_PROGRAM and b.lang == "python"):
            continue
        marks = []
        if b.named(SKIP):
            marks.append(pytest.mark.skip(reason=SKIP[b.named(SKIP)[0]]))
        if b.named(PEERS):
            marks.append(pytest.mark.peers)
        if b.named(SLOW):
            marks.append(pytest.mark.slow)
        params.append(pytest.param(b, id=b.id, marks=marks))
    return params


SHELL = ("sh", "bash", "shell", "console", "")


def test_tables_name_existing_blocks():
    for table in (SKIP, PEERS, SLOW, CHECKS):
        for key in table:
            named = [b for b in ALL_BLOCKS if b.named({key: None})]
            assert named, f"no block named {key}"
            if "\n" in key[1]:  # a piece across a line break names one block
                assert len(named) == 1, (key, named)
    known = set(SHELL) | {"python", "yaml", "text"}  # text: printed output, not a program
    odd = [b for b in ALL_BLOCKS if b.lang not in known]
    assert not odd, f"blocks in a language this test cannot run: {odd}"


def test_every_shipped_guide_is_tested():
    """A new guide in bert_tf/resources/docs/ has its blocks run here too (through its
    checkout symlink)."""
    shipped = {os.path.realpath(os.path.join(GUIDES_DIR, f)) for f in os.listdir(GUIDES_DIR)
               if f.endswith(".md")}
    listed = {os.path.realpath(os.path.join(ROOT, d)) for d in DOCS}
    assert shipped <= listed, f"guides whose blocks no test runs: {sorted(shipped - listed)}"


# A path or command that exists only in a checkout of the repository.
CHECKOUT_PATH = re.compile(r"\.venv/|(?<![\w./-])tests/|\btfrecords/\w+\.py\b|`make\b[^`]*`"
                           r"|^\s*make [\w-]+\s*(?:#.*)?$", re.M)
CHECKOUT_ONLY = re.compile(r"<!-- checkout-only -->.*?<!-- /checkout-only -->", re.S)


def checkout_paths(text):
    """(line, text) of each checkout path named outside the checkout-only regions."""
    opened, closed = text.count("<!-- checkout-only -->"), text.count("<!-- /checkout-only -->")
    assert opened == closed, f"{opened} checkout-only regions opened, {closed} closed"
    # Blank the regions out, keeping their newlines so line numbers stay right.
    text = CHECKOUT_ONLY.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return [(text.count("\n", 0, m.start()) + 1, m.group(0).strip())
            for m in CHECKOUT_PATH.finditer(text)]


def test_checkout_path_finder():
    text = ("Run `make test`.\n\n    .venv/bin/python tfrecords/make_sample_shards.py\n"
            "see tests/test_x.py\n```sh\nmake docs   # site\n```\n"
            "<!-- checkout-only -->\n`make demo` and .venv/bin/python\n<!-- /checkout-only -->\n"
            "we make the pairs; bert_tf/tests/ is not a checkout path\n")
    assert checkout_paths(text) == [(1, "`make test`"), (3, ".venv/"),
                                    (3, "tfrecords/make_sample_shards.py"), (4, "tests/"),
                                    (6, "make docs   # site")]


@pytest.mark.parametrize("guide", sorted(f for f in os.listdir(GUIDES_DIR) if f.endswith(".md")))
def test_shipped_guide_names_no_checkout_path(guide):
    """A pip user has the guides (python -m bert_tf.resources) but no checkout: checkout-only
    commands and paths go in a region marked <!-- checkout-only --> ... <!-- /checkout-only -->."""
    with open(os.path.join(GUIDES_DIR, guide), encoding="utf-8") as f:
        found = checkout_paths(f.read())
    assert not found, "\n".join(f"bert_tf/resources/docs/{guide}:{line}: {what!r} outside a "
                                 "checkout-only region" for line, what in found)


# ---- the world ----------------------------------------------------------------------------

SCRIPTS = ("create_pretraining_data.py", "run_pretraining.py", "export_savedmodel.py",
           "run_classifier.py", "run_squad.py", "run_ner.py", "extract_features.py")
DOC_WORDS = ("a fine film dull what some text the keeper trimmed wicks paris is capital of "
             "france lyon city who wrote it book was written by jane austen gripping "
             "beautifully shot cafe jumps john lives in london")


def _write(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _tiny_config(vocab_size):
    with open(os.path.join(ROOT, "bert_tf", "resources", "configs", "bert_tiny.json")) as f:
        cfg = json.load(f)
    # 4 layers (extract_features' --layers=-1,-2,-3,-4), narrower than bert_tiny to stay cheap.
    cfg.update(vocab_size=vocab_size, num_hidden_layers=4, hidden_size=64, intermediate_size=128,
               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return cfg


def _task_data(world, words, rng):
    def sent(n):
        return " ".join(rng.choice(words, n))

    # One batch of the blocks' sizes (MRPC 32, SQuAD 12) at least, so training has a step.
    mrpc = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    for i in range(32):
        mrpc.append(f"{i % 2}\t{i}\t{i + 100}\t{sent(6)}\t{sent(5)}")
    for name, rows in (("train", 32), ("dev", 8), ("test", 8)):
        _write(f"{world}/glue_data/MRPC/{name}.tsv", "\n".join(mrpc[:rows + 1]) + "\n")
    context = "The book was written by Jane Austen in a city far from Paris ."
    qas = [{"id": f"q{i}", "question": q, "answers": [{"text": a, "answer_start":
                                                        context.index(a)}]}
           for i, (q, a) in enumerate([("Who wrote it?", "Jane Austen"),
                                       ("What is far from it?", "Paris")] * 6)]
    squad = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": qas}]}]}
    for name in ("train-v1.1.json", "dev-v1.1.json"):
        _write(f"{world}/{name}", json.dumps(squad))
    sentence = ["John NNP B-NP B-PER", "lives VBZ B-VP O", "in IN B-PP O",
                "London NNP B-NP B-LOC", ". . O O", ""]
    for name, n in (("train", 32), ("dev", 4), ("test", 4)):
        _write(f"{world}/conll2003/{name}.txt",
               "\n".join(["-DOCSTART- -X- -X- O", ""] + sentence * n) + "\n")
    _write(f"{world}/input.txt", "the keeper trimmed the wicks\nwho wrote it ||| jane austen\n")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The prepared working directory; built once per module (see the module docstring)."""
    import keras

    from bert_tf import export
    from bert_tf.convert import hf
    from bert_tf.convert.tf1 import save_tf1_checkpoint
    from bert_tf.modeling.models import (BertClassifier, BertPretrainer, BertSpanLabeler,
                                         build_model)

    started = time.time()
    w = str(tmp_path_factory.mktemp("doc_world"))
    corpus = open(os.path.join(ROOT, "tfrecords", "sample_corpus.txt"), encoding="utf-8").read()
    words = sorted(set(re.findall(r"[a-z]+", (corpus + DOC_WORDS).lower())))
    # Laid out as bert-base-uncased's (30,522 ids; [CLS] 101, [SEP] 102), so the ids that
    # blocks show (REST bodies) are in range; the words are the corpus' and the blocks'.
    vocab = (["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]",
             "[MASK]"] + words + [chr(c) for c in range(ord("a"), ord("z") + 1)] + list(".,?!'"))
    real_tokens = len(vocab)
    vocab += [f"[unused{i}]" for i in range(99, 99 + 30522 - len(vocab))]
    rel = os.path.join(w, RELEASE)
    _write(f"{rel}/vocab.txt", "\n".join(vocab) + "\n")
    shutil.copy(f"{rel}/vocab.txt", f"{w}/vocab.txt")  # "a vocab you have" (the tour relearns it)
    cfg = _tiny_config(len(vocab))
    _write(f"{rel}/bert_config.json", json.dumps(cfg, indent=2))
    # configs/bert_base.json of the tour: tiny, with room for the vocab the tour learns.
    _write(f"{w}/configs/bert_base.json", json.dumps(_tiny_config(2048), indent=2))
    keras.utils.set_random_seed(1)
    pretrainer = build_model(BertPretrainer.from_bert_config(cfg))
    save_tf1_checkpoint(pretrainer, f"{rel}/bert_model.ckpt")
    # The HF BertModel (no heads, as most HF checkpoints) keeps only the real tokens: the
    # blocks that fine-tune or pre-train it stay cheap.
    hf_vocab = str(tmp_path_factory.mktemp("hf_vocab") / "vocab.txt")
    _write(hf_vocab, "\n".join(vocab[:real_tokens]) + "\n")
    hf_encoder = build_model(BertPretrainer.from_bert_config(_tiny_config(real_tokens))).encoder
    hf.save_hf_directory(hf_encoder, f"{w}/bert-base-uncased-hf", hf_vocab, do_lower_case=True)
    # Text and data files the blocks read.
    docs = corpus.strip().split("\n\n")
    _write(f"{w}/corpus.txt", corpus)
    _write(f"{w}/corpus/part1.txt", "\n\n".join(docs[:6]) + "\n")
    _write(f"{w}/corpus/part2.txt", "\n\n".join(docs[6:]) + "\n")
    _task_data(w, np.array(words), np.random.default_rng(0))
    # Pre-training records for the block that continues pre-training the HF model on
    # `data/train*` (the tour writes them too).
    from bert_tf.pretraining_data.runner import Options, run
    run(Options(input_file=f"{w}/corpus.txt", vocab_file=hf_vocab,  # for the HF model
                output_file=f"{w}/data/train.tfrecord", max_seq_length=128,
                max_predictions_per_seq=20, dupe_factor=1, random_seed=12345))
    # The exports the Python blocks load (the demo's names under export/, the serving
    # guide's under models/); the preprocessor + encoder pair only for a block that names it
    # (_pair_exports: no default test's block does, ~30 s of CPU).
    vocab_file = f"{rel}/vocab.txt"
    _PAIR[w] = (pretrainer, vocab_file)
    # One in-graph tokenizer for the three: traced once, not once per export.
    from bert_tf.export.preprocessor import TextPreprocessor
    shared = dict(vocab_file=vocab_file, seq_length=32,
                  preprocessing=TextPreprocessor(vocab_file, True, 32))
    export.export_for_serving(f"{w}/models", "bert_fill_mask", model=pretrainer,
                              task="fill_mask", **shared)
    shutil.copytree(f"{w}/models/bert_fill_mask", f"{w}/export/bert_demo")  # the demo's
    span = build_model(BertSpanLabeler(pretrainer.encoder))
    export.export_for_serving(f"{w}/models", "bert_squad", model=span, task="span", **shared)
    clf = build_model(BertClassifier(pretrainer.encoder, num_classes=2))
    export.export_for_serving(f"{w}/models", "bert_classifier", model=clf,
                              task="classification", labels=["neg", "pos"], **shared)
    # The scripts, reachable from the cwd as in a checkout.
    for script in SCRIPTS:
        os.symlink(os.path.join(ROOT, script), os.path.join(w, script))
    os.makedirs(f"{w}/tfrecords")
    shutil.copy(os.path.join(ROOT, "tfrecords", "make_sample_shards.py"), f"{w}/tfrecords")
    os.symlink(sys.prefix, f"{w}/.venv")
    print(f"doc world built in {time.time() - started:.1f} s")
    return w


_PAIR = {}  # world -> (its pre-trained model, vocab file): what _pair_exports exports
PAIR_NAMES = re.compile(r"\b(models/bert|export/bert_demo)_(preprocessor|encoder)\b")


def _pair_exports(block, world):
    """The preprocessor + encoder exports (models/bert_{preprocessor,encoder}/1 and the demo's
    copies, export/bert_demo_{preprocessor,encoder}/1), written the first time a block that
    names them runs."""
    if not PAIR_NAMES.search(block.text) or world not in _PAIR:
        return
    from bert_tf import export
    pretrainer, vocab_file = _PAIR.pop(world)
    w = world
    export.export_preprocessor(vocab_file, True, f"{w}/models/bert_preprocessor/1",
                               seq_length=32)
    export.export_encoder(pretrainer, f"{w}/models/bert_encoder/1", vocab_file=vocab_file,
                          do_lower_case=True)
    shutil.copytree(f"{w}/models/bert_preprocessor/1", f"{w}/export/bert_demo_preprocessor/1")
    shutil.copytree(f"{w}/models/bert_encoder/1", f"{w}/export/bert_demo_encoder/1")


def _env(world):
    bin_dir = os.path.dirname(sys.executable)
    rel = os.path.join(world, RELEASE)
    return dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
                BERT=rel, BERT_BASE_DIR=rel, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")


# TensorFlow's log lines, left out of a failure's output.
NOISE = re.compile(r"^[IWE]\d{4} |^\d{4}-\d\d-\d\d |^Function `|^Sharding callback|^Writing "
                   r"fingerprint|^Assets written|^WARNING: All log messages")


def _run(block, argv, world, stdin, timeout):
    reach = OUTSIDE.search(re.sub(r"(^|\s)#.*", "", block.text))  # comments may mention them
    if reach:
        pytest.fail(f"{block.doc}: block {block.first!r} (line {block.lineno}) uses "
                    f"{reach.group(0)!r}: not run; add it to SKIP in tests/test_doc_blocks.py "
                    "with the reason", pytrace=False)
    _pair_exports(block, world)
    started = time.time()
    try:
        proc = subprocess.run(argv, input=stdin, cwd=world, env=_env(world), capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.doc}: block {block.first!r} (line {block.lineno}) ran over "
                    f"{timeout} s", pytrace=False)
    print(f"{block.id}: {time.time() - started:.1f} s")
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if not NOISE.search(ln)]
        pytest.fail(f"{block.doc}: block {block.first!r} (line {block.lineno}) failed, exit "
                    f"{proc.returncode} (one that needs a network, server or TPU belongs in "
                    f"SKIP of tests/test_doc_blocks.py):\n" + "\n".join(lines[-30:]),
                    pytrace=False)
    return proc


# ---- checks beyond "exit 0" -----------------------------------------------------------------

def _versions(world, name):
    d = os.path.join(world, "models", name)
    return sorted(int(v) for v in os.listdir(d) if v.isdigit())


def check_tour(world):
    """The five-minute tour's outputs."""
    assert os.path.getsize(f"{world}/vocab.txt") > 0
    with open(f"{world}/out/eval_results.txt") as f:
        assert "masked_lm_accuracy" in f.read()
    assert os.path.exists(f"{world}/export/bert_base/1/saved_model.pb")
    with open(f"{world}/tmp/mrpc_output/eval_results.txt") as f:
        assert "eval_accuracy" in f.read()
    with open(f"{world}/tmp/squad_base/predictions.json") as f:
        assert set(json.load(f)) == {f"q{i}" for i in range(12)}
    with open(f"{world}/output.jsonl") as f:
        assert len(f.read().splitlines()) == 2


def check_fill_mask_export(world):
    """export/README's export command: the next version beside the world's own (1)."""
    versions = _versions(world, "bert_fill_mask")
    assert len(versions) >= 2, versions
    newest = f"{world}/models/bert_fill_mask/{versions[-1]}"
    with open(f"{newest}/assets.extra/bert_tf_export.json") as f:
        assert json.load(f)["task"] == "fill_mask"


def check_layout(world):
    """export/README's layout block lists what every version folder of the export holds."""
    block = next(b for b in ALL_BLOCKS if b.named({("export/README.md", "models/bert_fill_mask/1"
                                                    "/saved_model.pb"): None}))
    listed = [ln.split("#")[0].strip() for ln in block.text.splitlines()]
    listed = [p.replace("models/bert_fill_mask/1/", "") for p in listed if p]
    for v in _versions(world, "bert_fill_mask"):
        base = f"{world}/models/bert_fill_mask/{v}"
        for path in listed:
            assert os.path.exists(os.path.join(base, path)), f"{base}: no {path}"


def check_readme_classifier(world):
    """README's bert-run-classifier: evaluated, and the fine-tuned model exported."""
    with open(f"{world}/mrpc_out/eval_results.txt") as f:
        assert "eval_accuracy" in f.read()


def check_readme_pipeline(world):
    """README's text -> records -> pre-training: two shards, and the four exports of a
    pre-training run given --vocab_file, in the TF Serving layout."""
    assert sorted(f for f in os.listdir(f"{world}/records") if f.startswith("train-")) == [
        "train-00000-of-00002", "train-00001-of-00002"]
    for suffix in ("", "_embeddings", "_preprocessor", "_encoder"):
        assert os.path.exists(f"{world}/models/my_bert{suffix}/1/saved_model.pb"), suffix


def check_readme_convert(world):
    """README's bert-convert: an original-format release directory."""
    import tensorflow as tf
    out = f"{world}/bert-tf1"
    assert {"bert_config.json", "vocab.txt"} <= set(os.listdir(out))
    names = {n for n, _ in tf.train.list_variables(f"{out}/bert_model.ckpt")}
    assert "bert/embeddings/word_embeddings" in names


def check_k8s_job(job):
    """The long-runs guide's Kubernetes Job: exit 75 (preempted) is retried, 1 fails the Job."""
    from bert_tf.training.preemption import PREEMPTED_EXIT_CODE
    spec = job["spec"]
    rules = {r["action"]: r for r in spec["podFailurePolicy"]["rules"] if "onExitCodes" in r}
    assert rules["Ignore"]["onExitCodes"]["values"] == [PREEMPTED_EXIT_CODE]
    assert rules["FailJob"]["onExitCodes"]["values"] == [1]
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["name"] == rules["Ignore"]["onExitCodes"]["containerName"] == "bert"
    assert container["command"][0] == "bert-run-pretraining"


# (doc, text in the first line): a check run after the block (sh: with the world; yaml: with
# the parsed document; unlabelled layout blocks: instead of running them).
CHECKS = {
    ("docs/commands.md", "# A vocab, if you have none"): check_tour,
    ("docs/long_runs.md", "apiVersion: batch/v1"): check_k8s_job,
    ("README.md", "BERT=uncased_L-12_H-768_A-12"): check_readme_classifier,
    ("README.md", "bert-create-pretraining-data --input_file='corpus/*"): check_readme_pipeline,
    ("README.md", "bert-convert --from=hf"): check_readme_convert,
    ("export/README.md", "models/bert_fill_mask/1/saved_model.pb"): check_layout,
    ("export/README.md", "bert-export-savedmodel --bert_config_file"): check_fill_mask_export,
}
LAYOUTS = {("export/README.md", "models/bert_fill_mask/1/saved_model.pb")}


def _check(block, *args):
    for key in block.named(CHECKS):
        try:
            CHECKS[key](*args)
        except AssertionError as e:
            pytest.fail(f"{block.doc}: block {block.first!r} (line {block.lineno}): {e}",
                        pytrace=False)


# ---- the tests ----------------------------------------------------------------------------

@pytest.mark.parametrize("block", _params(SHELL))
def test_shell_block(block, world):
    if block.named(LAYOUTS):
        _check(block, world)
        return
    text = block.text
    for pattern, repl in REWRITES:
        text = pattern.sub(repl, text)
    _run(block, ["bash", "-e", "-o", "pipefail"], world, text, timeout=900)
    _check(block, world)


@pytest.mark.parametrize("block", _params(("python",)))
def test_python_block(block, world):
    _run(block, [sys.executable, "-"], world, block.text, timeout=300)
    _check(block, world)


@pytest.mark.parametrize("block", _params(("yaml",)))
def test_yaml_block(block):
    import yaml
    try:
        doc = yaml.safe_load(block.text)
    except yaml.YAMLError as e:
        pytest.fail(f"{block.doc}: block {block.first!r} (line {block.lineno}): {e}",
                    pytrace=False)
    assert isinstance(doc, dict), block
    _check(block, doc)


def _rest_call(loaded, body):
    """TF Serving's REST `:predict` on a loaded SavedModel: row (`instances`) or columnar
    (`inputs`) format, a bare value for a one-input signature."""
    import tensorflow as tf
    sig = loaded.signatures[body.get("signature_name", "serving_default")]
    specs = sig.structured_input_signature[1]
    if "instances" in body:
        rows = body["instances"]
        inputs = ({k: [r[k] for r in rows] for k in rows[0]} if isinstance(rows[0], dict)
                  else rows)
    else:
        inputs = body["inputs"]
    if not isinstance(inputs, dict):
        assert len(specs) == 1, f"a bare value for a signature of {sorted(specs)}"
        inputs = {next(iter(specs)): inputs}
    assert set(inputs) == set(specs), f"inputs {sorted(inputs)}, signature takes {sorted(specs)}"
    return sig(**{k: tf.constant(v, dtype=specs[k].dtype) for k, v in inputs.items()})


CURLS = [b for b in ALL_BLOCKS if b.lang in SHELL and re.search(r"\bcurl\b.*:predict", b.text,
                                                               flags=re.S)]


_LOADED = {}  # export folder -> the loaded SavedModel (read-only use)


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id, marks=[pytest.mark.slow] * bool(
    b.named(SLOW))) for b in CURLS])
def test_rest_body(block, world):
    """A (skipped) `curl ... :predict` block's body, run in-process on the export it names
    (the folder its `docker run -v` mounts, else models/<name>/), gives the outputs its
    comments show (those of the export's task)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer ops)
    where = f"{block.doc}: block {block.first!r} (line {block.lineno})"
    name = re.search(r"/v1/models/([\w.-]+):predict", block.text).group(1)
    body = json.loads(re.search(r"-d '(.*?)'", block.text, flags=re.S).group(1))
    mount = re.search(rf'-v "\$PWD/([^:"]+):/models/{re.escape(name)}"', block.text)
    base = os.path.join(world, mount.group(1) if mount else f"models/{name}")
    versions = sorted(int(v) for v in os.listdir(base) if v.isdigit()) if os.path.isdir(base) else []
    assert versions, f"{where}: no export in {base} (an earlier block writes it?)"
    export_dir = f"{base}/{versions[-1]}"
    with open(f"{export_dir}/assets.extra/bert_tf_export.json") as f:
        task = json.load(f)["task"]
    try:
        if export_dir not in _LOADED:  # two bodies for one export: loaded once
            _LOADED[export_dir] = tf.saved_model.load(export_dir)
        out = _rest_call(_LOADED[export_dir], body)
    except (AssertionError, KeyError, ValueError, TypeError, tf.errors.OpError) as e:
        pytest.fail(f"{where}: {type(e).__name__}: {e}", pytrace=False)
    shown = set()
    for line in block.text.splitlines():
        comment = line.strip()
        if not comment.startswith("#"):
            continue
        label = re.match(r"#\s*(\w+): ", comment)
        if label and label.group(1) != task:
            continue  # another task's outputs
        shown |= set(re.findall(r'"(\w+)":', comment)) - {"predictions"}
    missing = shown - set(out)
    assert not missing, f"{where}: {name} ({task}) has no outputs {sorted(missing)}"
