"""bert_tf: the original BERT release's workflow on TensorFlow 2.20 / Keras 3.

Packages follow the pipeline:
  tokenization      FullTokenizer (Python, exact), in-graph tokenizer, vocab builder
  pretraining_data  create_pretraining_data (original, streaming, Beam)
  modeling          BertConfig, layers, BertEncoder, heads, task models
  training          the one training loop (knows no task): trainer, optimizer, strategies
  pretraining       the pre-training task: run_pretraining, input pipeline, pre-flight, phases
  export            SavedModels (preprocessor, encoder, end-to-end) for Keras and TF Serving
  tasks             fine-tuning: classifier, SQuAD, NER, feature extraction
  convert           TF1 checkpoints, Hugging Face safetensors (one module per foreign format)

`bert_tf.from_pretrained(path, ...)` builds a Keras model from any BERT checkpoint
(`bert_tf.pretrained`). Importing bert_tf imports no TensorFlow: `from_pretrained` is loaded on
first use, and the Keras classes are registered lazily (below).
"""
import sys as _sys

# Keras backend and log level: set before anything imports keras (the commands add the CPU
# allocator: bert_tf/tf_env.py).
from bert_tf import tf_env as _tf_env  # noqa: E402  (imports nothing but os and sys)

_tf_env.apply()

__version__ = "0.1.0"


class BertError(ValueError):
    """User-facing error: its message is one line naming the file/flag and what is wrong."""


# Subpackages reachable as attributes after `import bert_tf` (`bert_tf.export.load_as_keras_model`),
# imported on first use: most import TensorFlow.
SUBMODULES = ("commands", "convert", "demo", "export", "fileio", "modeling", "pretrained",
              "pretraining", "pretraining_data", "script_flags", "tasks", "tokenization",
              "training")


def __getattr__(name):
    # Lazy: bert_tf.pretrained imports TensorFlow.
    if name == "from_pretrained":
        from bert_tf.pretrained import from_pretrained
        return from_pretrained
    if name in SUBMODULES:
        import importlib
        return importlib.import_module(f"bert_tf.{name}")
    raise AttributeError(f"module 'bert_tf' has no attribute {name!r}")


# The one seam from a lower layer up to the export package: `model.export()` (modeling) and
# `bert-convert --to=savedmodel` (convert) call `exporter(name)`; bert_tf.export registers its
# writers when imported, and is imported here on first use. No lower layer imports it.
_EXPORTERS = {}


def register_exporter(name, fn):
    """Registers an export writer (`bert_tf.export` does, for its public writers).

    Args:
        name: what `exporter(name)` looks it up by ("model", "encoder", ...).
        fn: the writer.
    """
    _EXPORTERS[name] = fn


def exporter(name):
    """The export writer registered as `name` ("model", "encoder", "preprocessor",
    "pretrained"), importing bert_tf.export first if needed."""
    if name not in _EXPORTERS:
        import importlib
        importlib.import_module("bert_tf.export")
    return _EXPORTERS[name]


def __dir__():
    return sorted(set(globals()) | set(SUBMODULES) | {"from_pretrained"})


# ---- Keras registration without importing Keras -------------------------------------------
# `keras.saving.load_model` finds custom classes by registered name ("bert_tf>BertClassifier")
# in Keras' global registry, which only our modules' decorators fill, and importing them
# imports TensorFlow. So the registry gets a stand-in per class, whose `from_config` imports
# the class's module (its decorator then replaces the stand-in) and builds the object. The
# stand-ins go in when Keras' registry module is imported, or now if it already is.
# tests/test_pretrained.py checks this table against every registration in bert_tf.
SERIALIZABLE = {
    "bert_tf.modeling.layers": ("BertEmbeddings", "BertSelfAttention", "TransformerBlock"),
    "bert_tf.modeling.encoder": ("BertEncoder",),
    "bert_tf.modeling.heads": ("MaskedLMHead", "DenseLogitsHead"),
    "bert_tf.modeling.models": ("BertPretrainer", "BertClassifier", "BertSpanLabeler",
                                "BertTokenClassifier", "BertEmbedder"),
    "bert_tf.tokenization.text_graph": ("BertPreprocessingLayer",),
    "bert_tf.training.optimization": ("WarmupLinearDecay", "AdamWeightDecay", "Lamb", "AdamW"),
    "bert_tf.pretrained": ("BertTextModel",),
}
_KERAS_REGISTRY = "keras.src.saving.object_registration"


class _StandIn:
    """Registry entry for a bert_tf class whose module is not imported yet."""

    def __init__(self, module, name):
        self.module, self.name = module, name

    def load(self):
        """The real class (imports its module)."""
        import importlib
        return getattr(importlib.import_module(self.module), self.name)

    def from_config(self, config, *args, **kwargs):
        return self.load().from_config(config, *args, **kwargs)

    def __call__(self, *args, **kwargs):
        return self.load()(*args, **kwargs)


def _register(registry):
    objects = registry.GLOBAL_CUSTOM_OBJECTS
    for module, names in SERIALIZABLE.items():
        for name in names:
            objects.setdefault(f"bert_tf>{name}", _StandIn(module, name))


class _RegistryHook:
    """sys.meta_path finder: runs `_register` right after Keras' registry module executes."""

    def find_spec(self, name, path, target=None):
        if name != _KERAS_REGISTRY:
            return None
        from importlib.machinery import PathFinder
        _sys.meta_path.remove(self)  # once
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_register(module):
            exec_module(module)
            _register(module)
        spec.loader.exec_module = exec_and_register
        return spec


if _KERAS_REGISTRY in _sys.modules:
    _register(_sys.modules[_KERAS_REGISTRY])
elif not any(isinstance(f, _RegistryHook) for f in _sys.meta_path):
    _sys.meta_path.insert(0, _RegistryHook())
