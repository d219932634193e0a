"""Files shipped inside the package: the model configs, the demo's sample corpus and the guides.

They live here (not at the repository root) so a pip-installed bert_tf has them; the checkout's
top-level `configs/`, `tfrecords/sample_corpus.txt`, `docs/*.md` (but CONVENTIONS.md),
`export/README.md` and `tfrecords/README.md` are symlinks to these files.
`python -m bert_tf.resources` lists the guides; `python -m bert_tf.resources serving` prints one.
"""
import importlib.resources
import os

from bert_tf import BertError


def _path(*parts):
    # pip installs unpacked, so the package's files are real files with a path.
    return os.fspath(importlib.resources.files(__name__).joinpath(*parts))


def config_names():
    """Names of the shipped bert_config.json files (`bert_base`, `bert_tiny`, ..., `tiny_test`)."""
    return sorted(name[:-len(".json")] for name in os.listdir(_path("configs"))
                  if name.endswith(".json"))


def config_file(name):
    """Path of the shipped config `name` (e.g. "bert_tiny" or "bert_tiny.json")."""
    name = name[:-len(".json")] if name.endswith(".json") else name
    if name not in config_names():
        raise BertError(f"{name}: no such shipped config; one of {', '.join(config_names())}")
    return _path("configs", name + ".json")


def sample_corpus():
    """Path of the sample corpus (11 short documents, one sentence a line) the demo uses."""
    return _path("sample_corpus.txt")


# Guide name -> (file, what it covers, where a checkout shows it), in reading order.
GUIDES = {
    "install": ("install.md", "extras, versions, what a pip install puts on PATH",
                "docs/install.md"),
    "demo": ("demo.md", "the first run (bert-demo), step by step, with its measurements",
             "docs/demo.md"),
    "commands": ("commands.md", "the original commands, side files, console output, data checks",
                 "docs/commands.md"),
    "models": ("models.md", "from_pretrained, fine-tuning, embeddings, converting, Keras loading",
               "docs/models.md"),
    "serving": ("serving.md", "exports, TF Serving, REST and gRPC, TF Hub drop-in",
                "export/README.md"),
    "tfrecords": ("tfrecords.md", "the pre-training data: schema, modes, side files",
                  "tfrecords/README.md"),
    "long-runs": ("long_runs.md", "preemption, exit codes, Kubernetes, the data step, faults",
                  "docs/long_runs.md"),
    "tpu": ("tpu.md", "TPU and clusters: Cloud TPU, pod slices, GPU clusters, Beam",
            "docs/tpu.md"),
    "compatibility": ("compatibility.md", "compatibility with the original release",
                      "docs/compatibility.md"),
    "benchmarks": ("benchmarks.md", "the benchmarks and their latest numbers",
                   "docs/benchmarks.md"),
    "api": ("API.md", "the library API by example, the package layout", "docs/API.md"),
}


def doc_file(name):
    """Path of the shipped guide `name`.

    Args:
        name: a key of `GUIDES` ("install", "serving", "long-runs", ...).
    """
    if name not in GUIDES:
        raise BertError(f"{name}: no such guide; one of {', '.join(GUIDES)}")
    return _path("docs", GUIDES[name][0])
