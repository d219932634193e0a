"""Files shipped inside the package: the model configs, the demo's sample corpus and the guides.

They live here (not at the repository root) so a pip-installed bert_tf has them; the checkout's
top-level `configs/`, `tfrecords/sample_corpus.txt`, `docs/API.md`, `export/README.md` and
`tfrecords/README.md` are symlinks to these files. `python -m bert_tf.resources` lists the
guides; `python -m bert_tf.resources serving` prints one.
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


# Guide name -> file, and where the checkout shows it.
GUIDES = {"api": ("API.md", "the library API by example (in a checkout: docs/API.md)"),
          "serving": ("serving.md", "exports, TF Serving, Keras loading "
                                    "(in a checkout: export/README.md)"),
          "tfrecords": ("tfrecords.md", "the pre-training data: schema, modes, side files "
                                        "(in a checkout: tfrecords/README.md)")}


def doc_file(name):
    """Path of the shipped guide `name`.

    Args:
        name: "api", "serving" or "tfrecords".
    """
    if name not in GUIDES:
        raise BertError(f"{name}: no such guide; one of {', '.join(GUIDES)}")
    return _path("docs", GUIDES[name][0])
