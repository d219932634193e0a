"""bert_tf: the original BERT release's workflow on TensorFlow 2.20 / Keras 3.

Modules (one concept each):
  config            BertConfig <-> bert_config.json
  tokenization      FullTokenizer (Python, exact original behaviour), vocab loading
  text_graph        in-graph tokenizer/packer built from TF-Serving-safe ops
  vocab_builder     learn a WordPiece vocab from a corpus
  layers / encoder / heads / models   Keras 3 model code
  checkpoints       original TF1 checkpoints and Hugging Face safetensors
  pretraining_data  create_pretraining_data (original + streaming modes)
  input_pipeline / optimization / training   run_pretraining
  export            SavedModels (preprocessor, encoder, end-to-end) for Keras and TF Serving
  tasks             fine-tuning: classifier, SQuAD, NER, feature extraction
"""
import os as _os

# Keras 3 must run on the TF backend; set it before anything imports keras.
_os.environ.setdefault("KERAS_BACKEND", "tensorflow")
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TF's C++ start-up chatter out of CLI output

__version__ = "0.1.0"


class BertError(ValueError):
    """User-facing error: its message is one line naming the file/flag and what is wrong."""
