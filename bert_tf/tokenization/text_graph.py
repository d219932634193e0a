"""In-graph BERT tokenizer and packer, exact, fast, and served by stock TF Serving >= 2.12.

`BertTextTokenizer` reproduces `bert_tf.tokenization.FullTokenizer` ids exactly. Each batch:

  * Rows made only of characters on which tf_text's FastBertNormalize + end-to-end
    FastWordpiece give the original's words (measured per code point, see `fast_path`; plain
    prose in most languages) are normalized by FastBertNormalize, or by StringLower alone when
    lower-casing keeps accents (keras-hub's `BertTokenizer(lowercase=True)`, HF's
    `strip_accents=False`). Stripping accents without lower-casing has no fast rows.
  * The other rows (control/format characters, U+FFFD, invalid UTF-8, ß/ﬁ/½/fullwidth forms
    when lower-casing, capital sigma...) get the original's steps composed from core ops:
      1. invalid UTF-8 bytes dropped (UnicodeTranscode errors="ignore" == decode "ignore");
      2. NUL, U+FFFD and control characters (category C*, unassigned included, except \\t \\n
         \\r) deleted, joining their neighbours;
      3. whitespace (\\t \\n \\r, Zs, U+2028/U+2029, which the original's str.split() splits
         on) -> space;
      4. if lower-casing: StringLower (ICU full lower-casing; Python's final-sigma rule and
         case mappings newer than ICU's where they differ);
      5. if stripping accents (default: when lower-casing, as the original): NFD, delete
         category Mn.
  * One FastWordpiece call (LinMaxMatch = the original's greedy longest match, `##`, a word with
    an unmatched piece -> one [UNK]) splits all rows into words (whitespace, punctuation and CJK
    ideographs, which lower-casing/NFD map only to each other) and pieces.
  * Rare rows where that is not exact go row by row through the composed steps, a regex split and
    FastWordpiece on the words: words over 200 bytes (the op's limit is in bytes, the original's
    is 200 characters; longer words -> [UNK]).

Character classes come from Python's `unicodedata` (`char_tables`), not from RE2's or ICU's
tables. `tokenize_to_pieces` (strings) keeps the table-based WordpieceTokenizeWithOffsets.

The vocab table is a `tf.lookup.StaticHashTable` over `TextFileInitializer(vocab_file)` (key =
whole line, value = line number), so the vocab file becomes a SavedModel asset. A vocab whose
lines `TextFileInitializer` would read differently from `tokenization.load_vocab` (surrounding
spaces/tabs, empty lines, duplicates: load_vocab keeps the last) is first rewritten to a canonical
copy in a temp dir with the same line numbers; the copy is then the asset.
"""
import functools
import os
import shutil
import tempfile
import weakref

import bert_tf  # noqa: F401  (sets KERAS_BACKEND before keras is imported)
import keras
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf import BertError
from bert_tf.tokenization import fast_path
from bert_tf.tokenization.input_packing import pack_inputs  # noqa: F401  (re-exported)
from bert_tf.tokenization.char_tables import (  # noqa: F401  (re-exported)
    _mask_ranges, _re2_class, _resolve_capital_sigma, case_fixups, char_classes,
    sigma_risky_class)
from bert_tf.tokenization import wordpiece as tokenization

# Python control flow here is static (config, not tensors): skip autograph's slow conversion.
_no_autograph = tf.autograph.experimental.do_not_convert

_MAX_CHARS = tokenization.MAX_INPUT_CHARS_PER_WORD
# UTF-8 needs at most 4 bytes a character: the byte limit never cuts before the char limit.
_MAX_BYTES = 4 * _MAX_CHARS


# ----------------------------------------------------------------------------------------------
# Vocab

def _remove_with(owner, tmp_dir):
    """Removes tmp_dir, a vocab file's temporary folder, when `owner` (the tokenizer whose table
    reads the file) is garbage-collected, or at exit. The table reads the file when built, but
    a SavedModel export copies it as an asset, so it lives as long as its tokenizer."""
    weakref.finalize(owner, _remove_in, os.getpid(), tmp_dir)


def _remove_in(pid, tmp_dir):
    # Only in the process that made it: a forked child exiting must not take the parent's.
    if os.getpid() == pid:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def _canonical_vocab_file(vocab_file, owner):
    """vocab_file itself if TextFileInitializer reads it like load_vocab, else a canonical copy
    (in a temporary folder removed with `owner`)."""
    lines = tokenization._read_lines(vocab_file)
    tokens = [line.strip(" \t\r\n") for line in lines]
    last = {tok: i for i, tok in enumerate(tokens)}  # load_vocab: later duplicates win
    canonical = all(
        tok and last[tok] == i and (line == tok or line == tok + "\r")
        for i, (line, tok) in enumerate(zip(lines, tokens)))
    if canonical:
        return vocab_file, len(lines)
    out = []
    for i, tok in enumerate(tokens):
        if tok and last[tok] == i:
            out.append(tok)
        else:
            # Never looked up: words contain no spaces. Keeps every later line number intact.
            filler = f"[unused line {i}]"
            while filler in last:
                filler += "_"
            out.append(filler)
    tmp_dir = tempfile.mkdtemp(prefix="bert_tf_vocab_")
    _remove_with(owner, tmp_dir)
    path = os.path.join(tmp_dir, os.path.basename(vocab_file) or "vocab.txt")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(out) + "\n")
    return path, len(lines)


# ----------------------------------------------------------------------------------------------
# Tokenizer

class BertTextTokenizer(tf.Module):
    """In-graph `tokenization.FullTokenizer(vocab_file, do_lower_case, strip_accents)`.

    `tokenize(strings)` -> int64 RaggedTensor [batch, words, pieces] (TF Hub convention).

    Args:
        vocab_file: vocab.txt; validated as FullTokenizer does.
        do_lower_case: lower-case (and, by default, strip accents: uncased checkpoints).
        strip_accents: drop combining marks after NFD; None (the original) = do_lower_case.
            False with do_lower_case: keras-hub's `BertTokenizer(lowercase=True)`.
        name: tf.Module name.
    """

    def __init__(self, vocab_file, do_lower_case=True, strip_accents=None, name=None):
        super().__init__(name=name)
        vocab = tokenization.load_vocab(vocab_file)  # validates + BertError on bad files
        self.vocab_file = vocab_file
        self.do_lower_case = bool(do_lower_case)
        self.strip_accents = bool(do_lower_case if strip_accents is None else strip_accents)
        table_file, num_lines = _canonical_vocab_file(vocab_file, self)
        self.vocab_size = num_lines
        self.cls_id = vocab[tokenization.CLS]
        self.sep_id = vocab[tokenization.SEP]
        self.mask_id = vocab[tokenization.MASK]
        self.unk_id = vocab[tokenization.UNK]
        self.pad_id = vocab.get(tokenization.PAD, 0)
        init = tf.lookup.TextFileInitializer(
            table_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
            tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER)
        self._table = tf.lookup.StaticHashTable(init, default_value=-1)
        self._wordpiece = tf_text.WordpieceTokenizer(
            self._table, suffix_indicator="##", max_bytes_per_word=_MAX_BYTES,
            token_out_type=tf.string, unknown_token=tokenization.UNK)
        cls = char_classes()
        self._delete_re = cls["delete"] + "+"
        self._space_re = cls["space"]
        self._mn_re = cls["mn"] + "+"
        # CJK ideographs are split off like punctuation (same words as spacing them out first:
        # lower-casing and NFD map CJK ideographs to CJK ideographs and nothing else to them).
        self._keep_re = cls["punct"][:-1] + cls["cjk"][1:]
        self._split_re = " +|" + self._keep_re
        # Fast path for rows made of characters on which the Fast* ops agree with the original.
        try:
            self._fast = fast_path.FastPath(tokenization.vocab_tokens(table_file),
                                            self.do_lower_case, strip_accents=self.strip_accents)
        except RuntimeError:  # FastWordpiece refuses a vocab with no plain word in it
            self._fast = None
        # Stripping accents without lower-casing: no fast rows (FastWordpiece splits them all).
        self._fast_re = None
        if fast_path.has_fast_normalizer(self.do_lower_case, self.strip_accents):
            self._fast_re = _re2_class(_mask_ranges(fast_path.fast_mask(
                self.do_lower_case, self.strip_accents))) + "*"
        risky = fast_path.split_risky_mask()
        self._split_risky_re = f"(?s).*{_re2_class(_mask_ranges(risky))}.*" if risky.any() else None
        if self.do_lower_case:
            self._case_fixups = case_fixups()
            fixups = "".join(f"\\x{{{ord(src):X}}}" for src, _ in self._case_fixups)
            self._fixup_re = f"(?s).*[{fixups}].*"
            risky = sigma_risky_class()
            self._sigma_re = f"(?s).*(\\x{{3A3}}.*{risky}|{risky}.*\\x{{3A3}}).*"

    @_no_autograph
    def _lower_fixups(self, x):
        for src, dst in self._case_fixups:
            x = tf.strings.regex_replace(x, f"\\x{{{ord(src):X}}}", dst)
        return x

    @_no_autograph
    def normalize(self, x):
        """The original's text cleaning, lower-casing and accent stripping (each if on):
        string [batch] -> string [batch], words separated by spaces (not yet split)."""
        x = tf.strings.unicode_transcode(x, "UTF-8", "UTF-8", errors="ignore")
        x = tf.strings.regex_replace(x, self._delete_re, "")
        x = tf.strings.regex_replace(x, self._space_re, " ")
        if self.do_lower_case:
            # ASCII first, without ICU: ICU lower-cases with the process locale (tr/az: I -> ı).
            x = tf.strings.lower(x)
            # Rare characters (case mappings newer than ICU's, capital sigma next to characters
            # ICU classifies differently): their exact paths run only for batches with them.
            if self._case_fixups:
                x = tf.cond(tf.reduce_any(tf.strings.regex_full_match(x, self._fixup_re)),
                            lambda: self._lower_fixups(x), lambda: tf.identity(x))
            x = tf.cond(tf.reduce_any(tf.strings.regex_full_match(x, self._sigma_re)),
                        lambda: _resolve_capital_sigma(x), lambda: tf.identity(x))
            x = tf.strings.lower(x, encoding="utf-8")
        if self.strip_accents:
            x = tf_text.normalize_utf8(x, "NFD")
            x = tf.strings.regex_replace(x, self._mn_re, "")
        return x

    @_no_autograph
    def basic_tokenize(self, strings):
        """BasicTokenizer: string [batch] -> string RaggedTensor [batch, words]."""
        x = tf.convert_to_tensor(strings, dtype=tf.string)
        if x.shape.rank == 0:
            x = tf.reshape(x, [1])
        words, _, _ = tf_text.regex_split_with_offsets(self.normalize(x), self._split_re,
                                                       self._keep_re)
        return words

    @_no_autograph
    def tokenize_to_pieces(self, strings):
        """String RaggedTensor [batch, words, pieces] (the vocab strings of the ids)."""
        words = self.basic_tokenize(strings)
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > _MAX_CHARS
        words = words.with_flat_values(
            tf.where(too_long, tokenization.UNK, words.flat_values))
        return self._wordpiece.tokenize(words)

    @_no_autograph
    def tokenize(self, strings):
        """int64 RaggedTensor [batch, words, pieces] of vocab ids."""
        return self._tokenize(strings, by_word=True)

    @_no_autograph
    def tokenize_flat(self, strings):
        """int64 RaggedTensor [batch, pieces]: `tokenize(strings).merge_dims(1, 2)`, cheaper
        (no word boundaries to find)."""
        return self._tokenize(strings, by_word=False)

    def _tokenize(self, strings, by_word):
        x = tf.convert_to_tensor(strings, dtype=tf.string)
        if x.shape.rank == 0:
            x = tf.reshape(x, [1])

        def exact(fn, *args):
            words = fn(*args)
            return words if by_word else words.merge_dims(1, 2)
        if self._fast is None:
            return exact(self._exact_ids, x)
        if self._fast_re is None:  # no Fast* normalizer for this casing: all rows exact
            text, risky = self._exact_text(x)
            redo = functools.partial(exact, self._exact_ids, x)
        else:
            fast = tf.strings.regex_full_match(x, self._fast_re)

            def with_exact_rows():
                # The exact normalization on the other rows, then one FastWordpiece call for
                # all.
                rows = tf.where(~fast)
                text, risky = self._exact_text(tf.gather_nd(x, rows))
                return tf.tensor_scatter_nd_update(self._fast.normalize(x), rows,
                                                   text), risky

            text, risky = tf.cond(tf.reduce_all(fast),
                                  lambda: (self._fast.normalize(x), tf.constant(False)),
                                  with_exact_rows)
            redo = functools.partial(exact, self._mixed, x, fast)
        ids, too_long = self._fast.words(text, by_word)
        # Rare: a word over 200 bytes or a risky character -> row by row.
        return tf.cond(risky | tf.reduce_any(too_long), redo, lambda: ids)

    def _exact_text(self, x):
        """(normalized x, whether FastWordpiece's own splitting may differ from the original's
        on it: `split_risky` characters)."""
        text = self.normalize(x)
        risky = tf.constant(False)
        if self._split_risky_re:
            risky = tf.reduce_any(tf.strings.regex_full_match(text, self._split_risky_re))
        return text, risky

    def _exact_ids(self, x):
        if self._fast is None or self._fast.word_wordpiece is None:
            pieces = self.tokenize_to_pieces(x)
            return pieces.with_flat_values(self._table.lookup(pieces.flat_values))
        words = self.basic_tokenize(x)
        # Words over 200 characters -> a word over the op's byte limit -> [UNK].
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > _MAX_CHARS
        words = words.with_flat_values(
            tf.where(too_long, fast_path.OVERSIZED_WORD, words.flat_values))
        return self._fast.word_wordpiece.tokenize(words)

    def _mixed(self, x, fast):
        """Fast path on the rows marked fast, exact path on the others; rows in input order."""
        fast_rows = tf.where(fast)[:, 0]
        words, long_rows = self._fast.tokenize(tf.gather(x, fast_rows))
        keep = tf.where(~long_rows)[:, 0]
        exact_rows = tf.concat([tf.where(~fast)[:, 0], tf.boolean_mask(fast_rows, long_rows)], 0)
        merged = tf.concat([tf.gather(words, keep), self._exact_ids(tf.gather(x, exact_rows))], 0)
        order = tf.math.invert_permutation(tf.concat([tf.gather(fast_rows, keep), exact_rows], 0))
        return tf.gather(merged, order)


# ----------------------------------------------------------------------------------------------
# Keras layer

@keras.saving.register_keras_serializable(package="bert_tf")
class BertPreprocessingLayer(keras.layers.Layer):
    """string [batch] (or a list of two for sentence pairs) -> BERT inputs dict at seq_length.

    The vocabulary is kept as a token list in `get_config()`, so a saved `.keras` file is
    self-contained (it does not point at a vocab file that may be gone).

    Args:
        vocabulary: a vocab.txt path, or the list of tokens (index = id).
        do_lower_case: bool, lower-case (and by default strip accents: uncased models).
        seq_length: int, length the inputs are packed (and truncated) to.
        strip_accents: None (= do_lower_case, the original) or a bool, as `BertTextTokenizer`.
        **kwargs: `keras.layers.Layer` arguments.
    """

    def __init__(self, vocabulary, do_lower_case=True, seq_length=128, strip_accents=None,
                 **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        if isinstance(vocabulary, (list, tuple)):
            self.vocabulary = [str(t) for t in vocabulary]
            tmp_dir = tempfile.mkdtemp(prefix="bert_tf_vocab_")
            vocab_file = os.path.join(tmp_dir, "vocab.txt")
            with open(vocab_file, "w", encoding="utf-8", newline="\n") as f:
                f.write("\n".join(self.vocabulary) + "\n")
        else:
            vocab_file = vocabulary
            self.vocabulary = tokenization.vocab_tokens(vocab_file)
        self.do_lower_case = bool(do_lower_case)
        self.seq_length = int(seq_length)
        try:
            self.tokenizer = BertTextTokenizer(vocab_file, do_lower_case=do_lower_case,
                                               strip_accents=strip_accents)
        except BaseException:
            if isinstance(vocabulary, (list, tuple)):
                shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
        if isinstance(vocabulary, (list, tuple)):  # its file lives as long as the tokenizer
            _remove_with(self.tokenizer, tmp_dir)
        self.strip_accents = self.tokenizer.strip_accents
        # No weights to make (the table is the tokenizer's): built now, so a model holding this
        # layer counts as built before its first call (a fit builds its optimizer up front).
        # A subclass with its own build() is left to Keras.
        if type(self).build is keras.layers.Layer.build:
            self.built = True

    def call(self, inputs):
        texts = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        segments = [self.tokenizer.tokenize(tf.reshape(t, [-1])) for t in texts]
        return pack_inputs(segments, self.seq_length, self.tokenizer.cls_id,
                           self.tokenizer.sep_id, self.tokenizer.pad_id)

    def compute_output_spec(self, inputs):
        first = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
        shape = (first.shape[0] if first.shape else None, self.seq_length)
        spec = keras.KerasTensor(shape, dtype="int32")
        return {"input_word_ids": spec,
                "input_mask": keras.KerasTensor(shape, dtype="int32"),
                "input_type_ids": keras.KerasTensor(shape, dtype="int32")}

    def get_config(self):
        config = super().get_config()
        config.update(vocabulary=list(self.vocabulary), do_lower_case=self.do_lower_case,
                      seq_length=self.seq_length, strip_accents=self.strip_accents)
        return config
