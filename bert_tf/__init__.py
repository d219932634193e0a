"""bert_tf: the original BERT release's workflow on TensorFlow 2.20 / Keras 3.

Packages follow the pipeline:
  tokenization      FullTokenizer (Python, exact), in-graph tokenizer, vocab builder
  pretraining_data  create_pretraining_data (original, streaming, Beam)
  modeling          BertConfig, layers, BertEncoder, heads, task models
  training          run_pretraining and fine-tuning loop, optimizer, strategies, input pipeline
  export            SavedModels (preprocessor, encoder, end-to-end) for Keras and TF Serving
  tasks             fine-tuning: classifier, SQuAD, NER, feature extraction
  convert           TF1 checkpoints, Hugging Face safetensors (one module per foreign format)
"""
import os as _os

# Keras 3 must run on the TF backend; set it before anything imports keras.
_os.environ.setdefault("KERAS_BACKEND", "tensorflow")
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TF's C++ start-up chatter out of CLI output

__version__ = "0.1.0"


class BertError(ValueError):
    """User-facing error: its message is one line naming the file/flag and what is wrong."""
