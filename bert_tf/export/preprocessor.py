"""TF Hub-style BERT preprocessor SavedModel: raw strings -> encoder inputs, in-graph.

The exported object has (TF Hub / Model Garden convention):
  - `__call__(text)` (alias `serve`) and signature `serving_default(text)`: string [batch] -> int32
    `input_word_ids`, `input_mask`, `input_type_ids` [batch, seq_length];
  - signature `serving_pairs(text, text_b)`: the same for sentence pairs;
  - `tokenize(text)`: int64 RaggedTensor [batch, words, pieces];
  - `bert_pack_inputs([tok_a] or [tok_a, tok_b], seq_length=N)`: [CLS] a [SEP] (b [SEP]) packed,
    the longer segment truncated first. N defaults to the export's seq_length; a restored
    function only accepts the Python values it was traced with, so other lengths must be
    listed at export time (`extra_pack_seq_lengths`).
The vocab file is a SavedModel asset (copied into assets/ by tf.saved_model.save).
"""
import bert_tf  # noqa: F401
import tensorflow as tf

from bert_tf import BertError
from bert_tf.tokenization import text_graph
from bert_tf.export import common


_TEXT = tf.TensorSpec([None], tf.string, name="text")
_TEXT_B = tf.TensorSpec([None], tf.string, name="text_b")
_TOKENS = tf.RaggedTensorSpec([None, None, None], tf.int64, ragged_rank=2)


def check_seq_length(seq_length, what="seq_length", pairs=True):
    if isinstance(seq_length, bool) or not isinstance(seq_length, int) or seq_length < (
            3 if pairs else 2):
        raise BertError(f"{what}: must be an integer >= {3 if pairs else 2}, got {seq_length!r}")


def check_text(text, name):
    """Rank-1 string check that survives TF Serving (which skips Python-side spec checks)."""
    return tf.ensure_shape(text, [None], name=f"check_{name}")


def check_same_batch(a, b):
    with tf.control_dependencies([tf.debugging.assert_equal(
            tf.shape(a)[0], tf.shape(b)[0], message="text and text_b must have the same batch")]):
        return tf.identity(a), tf.identity(b)


class BertPreprocessor(tf.Module):
    """In-graph tokenizer + packer (see module docstring)."""

    def __init__(self, vocab_file, do_lower_case=True, seq_length=128,
                 extra_pack_seq_lengths=(), name="bert_preprocessor"):
        super().__init__(name=name)
        check_seq_length(seq_length)
        for n in extra_pack_seq_lengths:
            check_seq_length(n, "extra_pack_seq_lengths")
        self.tokenizer = text_graph.BertTextTokenizer(vocab_file, do_lower_case)
        self._seq_length = int(seq_length)
        tok = self.tokenizer
        self._special = (tok.cls_id, tok.sep_id, tok.pad_id)
        # One trace of the tokenizer, called from every function (a Ref keeps it off the
        # saved object graph).
        self._tokenize_fn = common.Ref(tf.function(
            lambda text: tok.tokenize(check_text(text, "text")), autograph=False))

        def bert_pack_inputs(inputs, seq_length=self._seq_length):
            return self.pack(inputs, seq_length)

        self.bert_pack_inputs = tf.function(bert_pack_inputs, autograph=False)
        self.serve = self.__call__  # keras.layers.TFSMLayer's default endpoint name
        # Trace every packing variant now so they are all saved (each trace is ~1.5k ops).
        self.pack_seq_lengths = tuple(sorted({self._seq_length, *extra_pack_seq_lengths}))
        for n in self.pack_seq_lengths:
            for num_segments in (1, 2):
                self.bert_pack_inputs.get_concrete_function([_TOKENS] * num_segments,
                                                            seq_length=n)

    @property
    def seq_length(self):
        return self._seq_length

    def pack(self, segments, seq_length=None):
        cls_id, sep_id, pad_id = self._special
        return text_graph.pack_inputs(list(segments), seq_length or self._seq_length,
                                      cls_id, sep_id, pad_id)

    @tf.function(input_signature=[_TEXT], autograph=False)
    def tokenize(self, text):
        return self._tokenize_fn.obj(text)

    @tf.function(input_signature=[_TEXT], autograph=False)
    def __call__(self, text):
        return self.pack([self._tokenize_fn.obj(text)])

    @tf.function(input_signature=[_TEXT, _TEXT_B], autograph=False)
    def serve_pairs(self, text, text_b):
        a, b = check_same_batch(check_text(text, "text"), check_text(text_b, "text_b"))
        return self.pack([self._tokenize_fn.obj(a), self._tokenize_fn.obj(b)])


def export_preprocessor(vocab_file, do_lower_case, export_dir, seq_length=128,
                        extra_pack_seq_lengths=()):
    """Writes the preprocessor SavedModel to export_dir (atomically); returns export_dir."""
    module = BertPreprocessor(vocab_file, do_lower_case, seq_length, extra_pack_seq_lengths)
    tok = module.tokenizer
    metadata = {
        "format": common.FORMAT, "kind": "preprocessor", "seq_length": module.seq_length,
        "do_lower_case": bool(do_lower_case), "vocab_size": tok.vocab_size,
        "special_ids": {"cls": tok.cls_id, "sep": tok.sep_id, "pad": tok.pad_id,
                        "mask": tok.mask_id, "unk": tok.unk_id},
        "pack_seq_lengths": list(module.pack_seq_lengths),
    }
    # tf.functions, not concrete functions: saving retraces in its own context anyway.
    signatures = {"serving_default": module.__call__, "serving_pairs": module.serve_pairs}
    return common.write_saved_model(module, export_dir, signatures, metadata)
