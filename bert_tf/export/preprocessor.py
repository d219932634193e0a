"""The in-graph BERT preprocessor every export uses, and its TF Hub-style SavedModel.

`TextPreprocessor` (a tf.Module: the vocab table and asset travel with whatever holds it)
tokenizes like the original FullTokenizer and packs like its convert_single_example; the
preprocessor, end-to-end and serving exports all call it.

The exported preprocessor is a drop-in for Model Garden's `export_tfhub_lib` preprocessing
SavedModel (the TF Hub text preprocessor API):
  - `__call__(text)` (alias `serve`) and signature `serving_default(text)`: string [batch] ->
    int32 `input_word_ids`, `input_mask`, `input_type_ids` [batch, seq_length];
  - signature `serving_pairs(text, text_b)`: the same for sentence pairs;
  - `tokenize(text)`: int32 RaggedTensor [batch, words, pieces];
  - `tokenize_with_offsets(text)`: [ids, start_offsets, limit_offsets]: the same int32 ids
    plus int64 byte offsets of each piece in `text` (same ragged shape; `text[start:limit]` is
    the piece's input text);
  - `tokenize.get_special_tokens_dict()` (also on `tokenize_with_offsets`): int32 scalars
    `vocab_size`, `start_of_sequence_id`, `end_of_segment_id`, `padding_id` (the packer's: [PAD],
    else 0) and `mask_id`, for code that packs or masks by itself;
  - `bert_pack_inputs([tok_a] or [tok_a, tok_b], seq_length=N)`: [CLS] a [SEP] (b [SEP])
    packed, the longer segment truncated first. Segments are int32 or int64 ragged
    [batch, (words), (pieces)] or [batch, (pieces)]; N is any length >= 3 (a scalar int32
    argument, so `hub.KerasLayer(p.bert_pack_inputs, arguments=dict(seq_length=64))` works
    from one export), default the export's seq_length;
  - `variables`, `trainable_variables`, `regularization_losses` (empty: nothing to train).
The vocab file is a SavedModel asset (copied into assets/ by tf.saved_model.save).
"""
import os

import bert_tf  # noqa: F401
import tensorflow as tf

from bert_tf import BertError
from bert_tf.tokenization import offsets, text_graph
from bert_tf.export import common

TEXT_SPEC = tf.TensorSpec([None], tf.string, name="text")
TEXT_B_SPEC = tf.TensorSpec([None], tf.string, name="text_b")
SEQ_LENGTH_SPEC = tf.TensorSpec([], tf.int32, name="seq_length")


def check_seq_length(seq_length, what="seq_length", pairs=True):
    """BertError unless seq_length is a Python int leaving room for [CLS]/[SEP].

    Args:
        seq_length: the value to check.
        what: names it in the error (a flag or argument).
        pairs: need room for two [SEP]s (>= 3) rather than one (>= 2).
    """
    if isinstance(seq_length, bool) or not isinstance(seq_length, int) or seq_length < (
            3 if pairs else 2):
        raise BertError(f"{what}: must be an integer >= {3 if pairs else 2}, got {seq_length!r}")


def check_text(text, name):
    """Rank-1 string check that survives TF Serving (which skips Python-side spec checks).

    Args:
        text: string tensor, expected [batch].
        name: the input's name, used in the check op's name.

    Returns:
        `text` with its shape checked.
    """
    return tf.ensure_shape(text, [None], name=f"check_{name}")


def check_same_batch(a, b):
    """a, b with an in-graph check that their batch sizes agree.

    Args:
        a: tensor [batch, ...] (text).
        b: tensor [batch, ...] (text_b).
    """
    with tf.control_dependencies([tf.debugging.assert_equal(
            tf.shape(a)[0], tf.shape(b)[0], message="text and text_b must have the same batch")]):
        return tf.identity(a), tf.identity(b)


def _settings(vocab_file, do_lower_case, seq_length, strip_accents):
    lower = bool(do_lower_case)
    return (os.fspath(vocab_file), lower, seq_length,
            lower if strip_accents is None else bool(strip_accents))


class TextPreprocessor(tf.Module):
    """Tokenizer + packer shared by every export (in-graph, TF Serving-safe ops only).

    Args:
        vocab_file: WordPiece vocab, one token per line.
        do_lower_case: lower-case (+ strip accents by default), as the original's FullTokenizer.
        seq_length: default packed length.
        name: tf.Module name.
        strip_accents: None (= do_lower_case, the original) or a bool (keras-hub's
            `BertTokenizer(lowercase=True)`: do_lower_case=True, strip_accents=False).
    """

    def __init__(self, vocab_file, do_lower_case=True, seq_length=128, name="preprocessing",
                 strip_accents=None):
        super().__init__(name=name)
        check_seq_length(seq_length)
        self.tokenizer = text_graph.BertTextTokenizer(vocab_file, do_lower_case,
                                                      strip_accents=strip_accents)
        self.seq_length = int(seq_length)
        tok = self.tokenizer
        self.cls_id, self.sep_id, self.pad_id = tok.cls_id, tok.sep_id, tok.pad_id
        self.mask_id, self.vocab_size = tok.mask_id, tok.vocab_size
        self.do_lower_case, self.strip_accents = tok.do_lower_case, tok.strip_accents
        self._piece_lengths = None
        # A tokenizer trace is ~1,300 ops (seconds): traced once per input structure for every
        # function and every export that shares this preprocessor (run_pretraining's three
        # text-in models).
        self._tokenize_fn = common.TraceOnce(self._tokenize, reads_variables=False)
        self._tokenize_flat_fn = common.TraceOnce(self._tokenize_flat, reads_variables=False)

    def matches(self, vocab_file, do_lower_case, seq_length, strip_accents=None):
        """Whether this preprocessor is the one these settings would build (to share it).

        Args:
            vocab_file, do_lower_case, seq_length, strip_accents: as the constructor's.
        """
        return self.settings() == _settings(vocab_file, do_lower_case, seq_length,
                                            strip_accents)

    def settings(self):
        """(vocab file, do_lower_case, seq_length, strip_accents) as resolved."""
        return _settings(self.tokenizer.vocab_file, self.do_lower_case, self.seq_length,
                         self.strip_accents)

    def tokenize(self, text):
        """string [batch] -> int32 RaggedTensor [batch, words, pieces] (rank-1 checked)."""
        return self._tokenize_fn(tf.convert_to_tensor(text, tf.string))

    def _tokenize(self, text):
        pieces = self.tokenizer.tokenize(check_text(text, "text"))
        return pieces.with_flat_values(tf.cast(pieces.flat_values, tf.int32))

    def tokenize_with_offsets(self, text):
        """string [batch] -> [int32 ids, int64 start offsets, int64 limit offsets], each a
        RaggedTensor [batch, words, pieces]; offsets are bytes of `text`."""
        if self._piece_lengths is None:  # vocab-sized constants: only when asked for
            self._piece_lengths = offsets.piece_byte_lengths(self.tokenizer.vocab_file)
        ids, starts, limits = offsets.tokenize_with_offsets(
            self.tokenizer, check_text(text, "text"), self._piece_lengths)
        return [ids.with_flat_values(tf.cast(ids.flat_values, tf.int32)), starts, limits]

    def special_tokens_dict(self):
        """Model Garden's `BertTokenizer.get_special_tokens_dict()`: name -> Python int."""
        tok = self.tokenizer
        # padding_id is what the packer pads with ([PAD], else 0), so it is always there.
        return {"vocab_size": tok.vocab_size, "start_of_sequence_id": tok.cls_id,
                "end_of_segment_id": tok.sep_id, "padding_id": tok.pad_id,
                "mask_id": tok.mask_id}

    def tokenize_flat(self, text):
        """string [batch] -> int32 RaggedTensor [batch, pieces]; packing needs no word
        boundaries, and skipping them is cheaper."""
        return self._tokenize_flat_fn(tf.convert_to_tensor(text, tf.string))

    def _tokenize_flat(self, text):
        pieces = self.tokenizer.tokenize_flat(check_text(text, "text"))
        return pieces.with_flat_values(tf.cast(pieces.flat_values, tf.int32))

    def pack(self, segments, seq_length=None):
        """`text_graph.pack_inputs` with this vocab's special ids.

        Args:
            segments: 1 or 2 int RaggedTensors [batch, (words), (pieces)] or [batch, (pieces)].
            seq_length: Python int (static shape) or scalar int32 tensor; default the module's.
        """
        segments = list(segments)
        if not 1 <= len(segments) <= 2:
            raise BertError(f"bert_pack_inputs: expected 1 or 2 segments, got {len(segments)}")
        seq_length = self.seq_length if seq_length is None else seq_length
        if isinstance(seq_length, int):
            check_seq_length(seq_length, "bert_pack_inputs: seq_length",
                             pairs=len(segments) == 2)
        return text_graph.pack_inputs(segments, seq_length, self.cls_id, self.sep_id,
                                      self.pad_id)

    def text_to_ids(self, text, text_b=None, tokenize=None):
        """Encoder inputs for sentences or pairs.

        Args:
            text: string [batch].
            text_b: optional string [batch], the second segments.
            tokenize: overrides `tokenize_flat` (e.g. one traced tf.function shared by
                several signatures).

        Returns:
            Dict of int32 input_word_ids, input_mask, input_type_ids [batch, seq_length].
        """
        tokenize = tokenize or self.tokenize_flat
        text = check_text(text, "text")
        if text_b is None:
            return self.pack([tokenize(text)])
        text, text_b = check_same_batch(text, check_text(text_b, "text_b"))
        return self.pack([tokenize(text), tokenize(text_b)])


def shared_preprocessor(preprocessing, vocab_file, do_lower_case, seq_length, strip_accents):
    """`preprocessing` if given (BertError unless it has these settings), else a new
    TextPreprocessor of them.

    Args:
        preprocessing: a TextPreprocessor or None.
        vocab_file, do_lower_case, seq_length, strip_accents: as `TextPreprocessor`.
    """
    if preprocessing is None:
        return TextPreprocessor(vocab_file, do_lower_case, seq_length,
                                strip_accents=strip_accents)
    check_seq_length(seq_length)
    if not preprocessing.matches(vocab_file, do_lower_case, seq_length, strip_accents):
        names = "(vocab_file, do_lower_case, seq_length, strip_accents)"
        raise BertError(f"export: the shared preprocessor's {names} "
                        f"{preprocessing.settings()} differ from this export's "
                        f"{_settings(vocab_file, do_lower_case, seq_length, strip_accents)}")
    return preprocessing


class TokenizeModule(tf.Module):
    """`tokenize` / `tokenize_with_offsets` of the preprocessor SavedModel: callable on string
    [batch], with `get_special_tokens_dict()` (as Model Garden's, a sub-object).

    Args:
        fn: the traced tokenizer function (string [batch] -> its outputs).
        get_special_tokens_dict: tf.function with no arguments -> dict of int32 scalars.
        name: tf.Module name.
    """

    # Plain attributes (TF Hub's reusable SavedModel API; nothing to train).
    variables = trainable_variables = regularization_losses = None

    def __init__(self, fn, get_special_tokens_dict, name):
        super().__init__(name=name)
        self.variables, self.trainable_variables, self.regularization_losses = [], [], []
        self._fn = common.Ref(fn)
        self.get_special_tokens_dict = get_special_tokens_dict

    @tf.function(input_signature=[TEXT_SPEC], autograph=False)
    def __call__(self, text):
        return self._fn.obj(text)


class BertPreprocessor(tf.Module):
    """The preprocessor SavedModel's root object (see module docstring).

    Args:
        vocab_file: WordPiece vocab.
        do_lower_case: as the original's --do_lower_case.
        seq_length: packed length of the signatures; `bert_pack_inputs`' default.
        name: tf.Module name.
        strip_accents: None (= do_lower_case) or a bool, see `TextPreprocessor`.
        preprocessing: a `TextPreprocessor` of these settings to share (its tokenizer traces
            too) with other exports; None builds one.
    """

    # Plain attributes, not tf.Module's computed properties: TF Hub reads them from the
    # restored object (reusable SavedModel API).
    variables = trainable_variables = regularization_losses = None

    def __init__(self, vocab_file, do_lower_case=True, seq_length=128, name="bert_preprocessor",
                 strip_accents=None, preprocessing=None):
        super().__init__(name=name)
        self.preprocessing = shared_preprocessor(preprocessing, vocab_file, do_lower_case,
                                                 seq_length, strip_accents)
        pre = self.preprocessing
        self.variables, self.trainable_variables, self.regularization_losses = [], [], []
        # The tokenizer's traces (once each, in TextPreprocessor), called from every function;
        # packing needs no word boundaries: the cheaper flat ids.
        self._tokenize_fn, self._tokenize_flat_fn = pre.tokenize, pre.tokenize_flat
        # Saving retraces bert_pack_inputs' eight variants: each then only calls this.
        pack = common.TraceOnce(pre.pack, reads_variables=False)

        def bert_pack_inputs(inputs, seq_length=pre.seq_length):
            return pack(inputs, seq_length)

        self.bert_pack_inputs = tf.function(bert_pack_inputs, autograph=False)
        special = pre.special_tokens_dict()

        def get_special_tokens_dict():
            # Python ints as constants: int32 scalars, as Model Garden's.
            return {k: tf.constant(v, tf.int32) for k, v in special.items()}

        get_special_tokens_dict = tf.function(get_special_tokens_dict, input_signature=[],
                                              autograph=False)
        self.tokenize = TokenizeModule(self._tokenize_fn, get_special_tokens_dict,
                                       "tokenize")
        self.tokenize_with_offsets = TokenizeModule(
            tf.function(pre.tokenize_with_offsets, autograph=False), get_special_tokens_dict,
            "tokenize_with_offsets")
        self.serve = self.__call__  # keras.layers.TFSMLayer's default endpoint name
        # A restored function only accepts the input structures it was traced with: trace
        # 1 or 2 segments, ragged rank 1 or 2, int32 or int64 pieces, seq_length a tensor.
        for dtype in (tf.int32, tf.int64):
            for rank in (1, 2):
                spec = tf.RaggedTensorSpec([None] * (rank + 1), dtype, ragged_rank=rank)
                for num_segments in (1, 2):
                    self.bert_pack_inputs.get_concrete_function(
                        [spec] * num_segments, seq_length=SEQ_LENGTH_SPEC)

    @property
    def seq_length(self):
        """The packed length of `__call__` and the signatures."""
        return self.preprocessing.seq_length

    @property
    def tokenizer(self):
        """The in-graph BertTextTokenizer (special ids, vocab size)."""
        return self.preprocessing.tokenizer

    @tf.function(input_signature=[TEXT_SPEC], autograph=False)
    def __call__(self, text):
        return self.preprocessing.pack([self._tokenize_flat_fn(text)])

    @tf.function(input_signature=[TEXT_SPEC, TEXT_B_SPEC], autograph=False)
    def serve_pairs(self, text, text_b):
        """The `serving_pairs` signature: packed encoder inputs for sentence pairs.

        Args:
            text: string [batch], first segments.
            text_b: string [batch], second segments.
        """
        return self.preprocessing.text_to_ids(text, text_b, tokenize=self._tokenize_flat_fn)


def export_preprocessor(vocab_file, do_lower_case, export_dir, seq_length=128,
                        extra_pack_seq_lengths=(), strip_accents=None, preprocessing=None):
    """Writes the preprocessor SavedModel to export_dir (atomically); returns export_dir.

    Args:
        vocab_file: WordPiece vocab (copied into the export's assets).
        do_lower_case: as the original's --do_lower_case.
        export_dir: output directory (replaced atomically).
        seq_length: packed length of `__call__` / the signatures, and the default of
            `bert_pack_inputs` (which takes any length).
        extra_pack_seq_lengths: kept for compatibility (any length works now); validated
            and recorded in the metadata's `pack_seq_lengths`.
        strip_accents: None (strip exactly when lower-casing, as the original) or a bool
            (False with do_lower_case: keras-hub's `BertTokenizer(lowercase=True)`); the
            metadata records the resolved value next to do_lower_case.
        preprocessing: a `TextPreprocessor` of these settings shared with other exports.
    """
    for n in extra_pack_seq_lengths:
        check_seq_length(n, "extra_pack_seq_lengths")
    module = BertPreprocessor(vocab_file, do_lower_case, seq_length,
                              strip_accents=strip_accents, preprocessing=preprocessing)
    tok = module.tokenizer
    metadata = {
        "format": common.FORMAT, "kind": "preprocessor", "seq_length": module.seq_length,
        "do_lower_case": tok.do_lower_case, "strip_accents": tok.strip_accents,
        "vocab_size": tok.vocab_size,
        "special_ids": {"cls": tok.cls_id, "sep": tok.sep_id, "pad": tok.pad_id,
                        "mask": tok.mask_id, "unk": tok.unk_id},
        "pack_seq_lengths": sorted({module.seq_length, *extra_pack_seq_lengths}),
    }
    # tf.functions, not concrete functions: saving retraces in its own context anyway.
    signatures = {"serving_default": module.__call__, "serving_pairs": module.serve_pairs}
    return common.write_saved_model(module, export_dir, signatures, metadata)
