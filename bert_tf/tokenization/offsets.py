"""Byte offsets of `BertTextTokenizer`'s word pieces in the input strings (TF Hub's
`tokenize_with_offsets`), from core ops plus RegexSplitWithOffsets (TF Serving-safe).

The ids are the tokenizer's own (`tokenize`); only their spans are computed here:
  1. every input character (invalid UTF-8 dropped, as the tokenizer does) is normalized on its
     own (`normalize` on one-character strings) and the results joined. That is the tokenizer's
     normalized text up to Σ -> σ/ς (context-dependent, same byte length) and the order of
     combining marks (never split), so the words split from it are the tokenizer's words;
  2. a piece's span inside its word is the byte length of its vocab token (less "##" after the
     first piece); an [UNK] spans its whole word;
  3. normalized bytes map back to the input character they came from: a piece starts where the
     character of its first byte starts and ends where the character of its last byte ends
     (é -> e spans both bytes of é; characters normalized to nothing, such as control
     characters, belong to no piece).
"""
import bert_tf  # noqa: F401
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.tokenization import wordpiece as tokenization

_no_autograph = tf.autograph.experimental.do_not_convert


def piece_byte_lengths(vocab_file):
    """(first, later): int64 numpy arrays, the byte length of each vocab id as a word's first
    piece / as a later piece (without the "##" suffix indicator).

    Args:
        vocab_file: the tokenizer's vocab (index = id).
    """
    tokens = tokenization.vocab_tokens(vocab_file)
    first = [len(t.encode("utf-8")) for t in tokens]
    later = [n - 2 if t.startswith("##") and n > 2 else n for t, n in zip(tokens, first)]
    return np.array(first, np.int64), np.array(later, np.int64)


def _exclusive_cumsum_in_rows(values, row_splits):
    """Exclusive cumulative sum of flat `values` restarting at every row of `row_splits`."""
    total = tf.concat([tf.zeros([1], values.dtype), tf.cumsum(values)], 0)
    rowids = tf.ragged.row_splits_to_segment_ids(row_splits)
    return total[:-1] - tf.gather(tf.gather(total, row_splits[:-1]), rowids)


@_no_autograph
def tokenize_with_offsets(tokenizer, strings, lengths):
    """Ids plus start and limit byte offsets of every piece, as three RaggedTensors.

    Args:
        tokenizer: a `text_graph.BertTextTokenizer`.
        strings: string [batch].
        lengths: `piece_byte_lengths(vocab_file)` of the tokenizer's vocab.

    Returns:
        (int64 ids, int64 starts, int64 limits), each [batch, words, pieces]:
        `strings[b][starts[b, w, p]:limits[b, w, p]]` is the input text of that piece.
    """
    first_len, later_len = (tf.constant(n, tf.int64) for n in lengths)
    x = tf.convert_to_tensor(strings, dtype=tf.string)
    ids = tokenizer.tokenize(x)
    cps, char_starts = tf.strings.unicode_decode_with_offsets(x, "UTF-8", errors="ignore")
    cp = cps.flat_values
    char_bytes = 1 + sum(tf.cast(cp >= lo, tf.int64) for lo in (0x80, 0x800, 0x10000))
    # Each distinct character once (text repeats few characters many times).
    distinct, index = tf.unique(cp)
    normed = tf.gather(tokenizer.normalize(
        tf.strings.unicode_encode(tf.expand_dims(distinct, 1), "UTF-8")), index)
    norm_bytes = tf.cast(tf.strings.length(normed), tf.int64)
    text = tf.strings.reduce_join(cps.with_flat_values(normed), axis=1)
    words, word_starts, word_ends = tf_text.regex_split_with_offsets(
        text, tokenizer._split_re, tokenizer._keep_re)
    # Step 1's claim, checked rather than trusted: a mismatch would give wrong spans.
    check = tf.debugging.assert_equal(
        words.row_splits, ids.row_splits,
        message="tokenize_with_offsets: words differ from tokenize's (please report)")
    with tf.control_dependencies([check]):
        pieces = tf.identity(ids.values.flat_values)
    # Normalized positions are global (all rows joined): each row starts where its first
    # character's normalized bytes start.
    norm_total = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(norm_bytes)], 0)
    char_norm_starts = norm_total[:-1]
    row_base = tf.gather(norm_total, cps.row_splits[:-1])
    word_base = tf.gather(row_base, words.value_rowids()) + word_starts.flat_values
    word_len = word_ends.flat_values - word_starts.flat_values
    piece_splits = ids.values.row_splits
    piece_word = ids.values.value_rowids()
    in_word = tf.range(tf.size(pieces, out_type=tf.int64)) - tf.gather(piece_splits, piece_word)
    this_word_len = tf.gather(word_len, piece_word)
    size = tf.where(in_word == 0, tf.gather(first_len, pieces), tf.gather(later_len, pieces))
    size = tf.where(tf.equal(pieces, tokenizer.unk_id), this_word_len, size)
    start = _exclusive_cumsum_in_rows(size, piece_splits)
    end = tf.maximum(tf.minimum(start + size, this_word_len), start + 1)
    base = tf.gather(word_base, piece_word)
    # The character holding a normalized byte: the last one starting at or before it (the
    # characters normalized to nothing start where the next one does, and come first).
    first_char = tf.searchsorted(char_norm_starts, base + start, side="right") - 1
    last_char = tf.searchsorted(char_norm_starts, base + end - 1, side="right") - 1
    starts = tf.gather(char_starts.flat_values, first_char)
    limits = tf.gather(char_starts.flat_values, last_char) + tf.gather(char_bytes, last_char)
    like = ids.with_flat_values
    return like(pieces), like(starts), like(limits)
