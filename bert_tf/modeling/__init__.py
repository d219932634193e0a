"""Modeling: BertConfig and the Keras 3 BERT model code.

  config   BertConfig <-> bert_config.json (pure Python)
  layers   embeddings, attention, transformer block (Keras 3)
  encoder  BertEncoder: the original's `bert/` tower
  heads    masked-LM, NSP/classification, span and tagging heads
  models   task models taking an encoder instance (pre-training, classifier, SQuAD, NER),
           find_encoder / ensure_built / build_model

`from bert_tf.modeling import BertConfig` is cheap; the Keras classes load on first access, so
code that only reads configs never imports TensorFlow.
"""
import importlib as _importlib

from bert_tf.modeling.config import BertConfig  # noqa: F401

_LAZY = {
    "BertEncoder": "encoder",
    "BertPretrainer": "models",
    "BertClassifier": "models",
    "BertSpanLabeler": "models",
    "BertTokenClassifier": "models",
    "BertTaskModel": "models",
    "MaskedLMHead": "heads",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(_importlib.import_module(f"bert_tf.modeling.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'bert_tf.modeling' has no attribute {name!r}")
