"""Tokenization: the original's WordPiece in Python, in-graph, and a vocab learner.

  wordpiece     FullTokenizer / BasicTokenizer / WordpieceTokenizer (exact original behaviour),
                vocab loading; pure Python, no TensorFlow import
  id_tokenizer  IdTokenizer: the same ids, cached per word and batched (pre-training data)
  text_graph    in-graph tokenizer and packer from TF-Serving-safe tf_text ops (imports TF)
  vocab_check   check_vocab_size: the one vocab-vs-model check
  vocab_builder learn a WordPiece vocab from a corpus (`python -m bert_tf.tokenization.vocab_builder`)

`bert_tf.tokenization.FullTokenizer` etc. keep the original `tokenization.py` names.
"""
from bert_tf.tokenization.wordpiece import (  # noqa: F401
    CLS, MASK, MAX_INPUT_CHARS_PER_WORD, PAD, REQUIRED_TOKENS, SEP, UNK, BasicTokenizer,
    FullTokenizer, WordpieceTokenizer, convert_to_unicode, load_vocab, vocab_tokens,
    whitespace_tokenize)
from bert_tf.tokenization.id_tokenizer import IdTokenizer  # noqa: F401
from bert_tf.tokenization.vocab_check import check_vocab_size  # noqa: F401
