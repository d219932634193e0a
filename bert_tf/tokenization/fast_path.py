"""The fast in-graph path of `BertTextTokenizer`: FastBertNormalize + end-to-end FastWordpiece.

tf_text's Fast* ops do the original's work in two C++ passes, but they follow their own (ICU)
tables: FastBertNormalize keeps U+FFFD, turns NUL and zero-width spaces into spaces, folds ß/ﬁ/½
and fullwidth forms, knows no final sigma; FastWordpiece's splitting uses ICU's punctuation
class. On most code points they agree with the original all the same. So agreement is measured,
not assumed: `fast_mask` runs the ops (the normalizer of the casing) on every code
point in context and compares the words with the original's. A row made only of agreeing
characters (checked with one RE2 pass) takes the fast path. Per-character agreement carries over
to whole strings because every step is per character, except two the mask leaves out when
lower-casing: capital sigma (Python picks σ or ς from the context) and characters whose NFD has
a surviving combining mark (NFD reorders those).

FastBertNormalize lower-cases and strips accents together. Lower-casing that keeps accents
(keras-hub's `BertTokenizer(lowercase=True)`) uses core StringLower instead (ASCII first: ICU
lower-cases with the process locale), measured the same way; stripping accents without
lower-casing has no fast normalizer (`has_fast_normalizer`).

WordPiece itself is exact: FastWordpiece's LinMaxMatch gives the greedy longest match, and a
word with an unmatched piece is one `[UNK]`. The original's limit is 200 characters, the op's
is in bytes: the op runs with 200 bytes, so every word it cuts is one `[UNK]` spanning more than
200 bytes, and the caller redoes such rows on the exact path (which counts characters).
"""
import functools

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.tokenization import char_tables, probe_cache
from bert_tf.tokenization import wordpiece as tokenization

MAX_WORD_BYTES = tokenization.MAX_INPUT_CHARS_PER_WORD  # bytes; longer words -> exact path
# Words of the exact path: at most 200 characters, so at most 4 * 200 bytes.
MAX_EXACT_WORD_BYTES = 4 * tokenization.MAX_INPUT_CHARS_PER_WORD
OVERSIZED_WORD = "#" * (MAX_EXACT_WORD_BYTES + 1)  # stands in for a word over 200 characters
_NUM_CPS = 0x110000
_SIGMA = 0x03A3


class _Identity:
    """Cased: FastBertNormalize would only delete control characters and map whitespace to
    spaces; rows with either are not fast anyway (FastWordpiece splits on whitespace itself)."""

    @staticmethod
    def normalize(x):
        return x


class _LowerOnly:
    """Lower-casing that keeps accents: StringLower, ASCII first (without ICU, whose
    lower-casing follows the process locale: tr/az I -> ı)."""

    @staticmethod
    def normalize(x):
        return tf.strings.lower(tf.strings.lower(x), encoding="utf-8")


def has_fast_normalizer(do_lower_case, strip_accents):
    """Whether rows can take the fast path: every casing but accent stripping without
    lower-casing (no op sequence here does that per character).

    Args:
        do_lower_case: the tokenizer's lower-casing.
        strip_accents: its accent stripping (a bool).
    """
    return bool(do_lower_case) or not strip_accents


def _fast_ops(do_lower_case, tokens, unk_token, strip_accents=None):
    strip = do_lower_case if strip_accents is None else strip_accents
    if do_lower_case:
        normalizer = (tf_text.FastBertNormalizer(lower_case_nfd_strip_accents=True) if strip
                      else _LowerOnly())
    else:
        normalizer = _Identity()  # stripping without lower-casing: no fast rows at all
    wordpiece = tf_text.FastWordpieceTokenizer(
        tokens, suffix_indicator="##", max_bytes_per_word=MAX_WORD_BYTES,
        token_out_type=tf.int64, unknown_token=unk_token, no_pretokenization=False,
        support_detokenization=False)
    return normalizer, wordpiece


def _words(text, punct):
    """The original's words of already cleaned and normalized text: split on whitespace and
    around punctuation."""
    words, current = [], []
    for ch in text:
        if ch.isspace() or punct[ord(ch)]:
            if current:
                words.append("".join(current))
                current = []
            if not ch.isspace():
                words.append(ch)
        else:
            current.append(ch)
    if current:
        words.append("".join(current))
    return [w.encode("utf-8") for w in words]


@functools.lru_cache(maxsize=None)
def _recent_punct_mask():
    """Punctuation newer than Unicode 3.2. FastWordpiece classifies punctuation at run time
    with the ICU of the serving binary (TF Serving 2.12 has older tables than this process):
    an ICU that does not know a character would glue it to its neighbours."""
    import unicodedata
    cats = char_tables._categories()
    mask = np.zeros(_NUM_CPS, bool)
    for cp in np.flatnonzero(np.char.startswith(cats, "P")):
        if unicodedata.ucd_3_2_0.category(chr(cp)) == "Cn":
            mask[cp] = True
    return mask


def fast_mask(do_lower_case, strip_accents=None):
    """bool [0x110000]: code points on which the fast path gives the original's words.

    Args:
        do_lower_case: the tokenizer's lower-casing.
        strip_accents: None (= do_lower_case) or a bool; a casing without a fast normalizer
            (`has_fast_normalizer`) is a ValueError.
    """
    strip = bool(do_lower_case if strip_accents is None else strip_accents)
    if not has_fast_normalizer(do_lower_case, strip):
        raise ValueError("no fast normalizer strips accents without lower-casing")
    return _fast_mask(bool(do_lower_case), strip)


@functools.lru_cache(maxsize=None)
@probe_cache.cached()
def _fast_mask(do_lower_case, strip):
    import unicodedata
    deleted = char_tables._deleted_mask()
    # Unassigned and private-use code points (most of the range) are deleted by the original
    # and never fast; the other deleted ones (controls, format characters) are probed.
    cats = char_tables._categories()
    cps = np.flatnonzero((cats != "Cn") & (cats != "Co") & (cats != "Cs"))
    texts = [f"a{chr(cp)}b {chr(cp)}" for cp in cps]
    normalizer, wordpiece = _fast_ops(do_lower_case, ["[UNK]", "zz"], "[UNK]", strip)
    with tf.init_scope():
        normed = normalizer.normalize(tf.constant(texts))
        _, starts, ends = wordpiece.tokenize_with_offsets(normed)
        normed = normed.numpy()
        splits = starts.row_splits.numpy()
        starts, ends = starts.values.numpy(), ends.values.numpy()
    counts = np.diff(splits)
    first = splits[:-1].clip(max=len(starts) - 1)
    # Deleted by the original: the only word is "ab" (bytes 0..2 of the normalized text).
    ok = deleted[cps] & (counts == 1) & (starts[first] == 0) & (ends[first] == 2)
    punct = np.char.startswith(cats, "P")
    for lo, hi in ((33, 47), (58, 64), (91, 96), (123, 126)):
        punct[lo:hi + 1] = True
    strip_fn = tokenization.BasicTokenizer._strip_accents
    for i in np.flatnonzero(~deleted[cps]):
        c = chr(cps[i])
        # The text is "a{c}b {c}": whitespace splits first, CJK ideographs are words of their
        # own, then each word is normalized and split around punctuation.
        n = c.lower() if do_lower_case else c
        n = strip_fn(n) if strip else n
        if c.isspace() or cats[cps[i]] == "Zs":
            want = [b"a", b"b"]
        elif tokenization._is_cjk(cps[i]):
            want = [b"a"] + _words(n, punct) + [b"b"] + _words(n, punct)
        else:
            want = _words("a" + n + "b", punct) + _words(n, punct)
        lo, hi = splits[i], splits[i + 1]
        ok[i] = want == [normed[i][s:e] for s, e in zip(starts[lo:hi], ends[lo:hi])]
    mask = np.zeros(_NUM_CPS, bool)
    mask[cps] = ok
    mask &= ~_recent_punct_mask()
    if do_lower_case:
        mask[_SIGMA] = False  # final or not: Python looks at the context
    if do_lower_case and strip:
        for cp in np.flatnonzero(mask):
            if any(unicodedata.combining(d) and unicodedata.category(d) != "Mn"
                   for d in unicodedata.normalize("NFD", chr(cp).lower())):
                mask[cp] = False
    return mask


@functools.lru_cache(maxsize=None)
@probe_cache.cached()
def split_risky_mask():
    """bool [0x110000]: characters of normalized text that FastWordpiece's own splitting
    (whitespace, punctuation, CJK) treats differently from the original."""
    cats = char_tables._categories()
    cps = np.flatnonzero(~char_tables._deleted_mask() & (cats != "Cs"))
    _, wordpiece = _fast_ops(False, ["[UNK]", "zz"], "[UNK]")
    with tf.init_scope():
        _, starts, _ = wordpiece.tokenize_with_offsets(tf.constant([f"a{chr(c)}b" for c in cps]))
        counts = np.diff(starts.row_splits.numpy())
    punct = np.char.startswith(cats, "P")
    for lo, hi in ((33, 47), (58, 64), (91, 96), (123, 126)):
        punct[lo:hi + 1] = True
    for lo, hi in tokenization._CJK_RANGES:
        punct[lo:hi + 1] = True
    space = np.array([chr(c).isspace() for c in cps])
    want = np.where(space, 2, np.where(punct[cps], 3, 1))
    mask = np.zeros(_NUM_CPS, bool)
    mask[cps] = counts != want
    mask[ord(" ")] = False
    return mask | _recent_punct_mask()


class FastPath:
    """FastBertNormalize + FastWordpiece over a batch; ids as [batch, words, pieces].

    Args:
        tokens: the vocab, index = id (a token never used must not be matchable: no "" and no
            duplicates).
        do_lower_case: like `FullTokenizer`.
        unk_token: the vocab's unknown token.
        strip_accents: like `FullTokenizer` (None = do_lower_case).
    """

    def __init__(self, tokens, do_lower_case, unk_token=tokenization.UNK, strip_accents=None):
        # FastWordpiece keeps tokens up to 256 bytes; words here are at most 200 bytes, so
        # longer tokens never match and are replaced by unmatchable ones (ids stay in place).
        limit = MAX_WORD_BYTES + 2
        sizes = [len(t.encode("utf-8")) for t in tokens]
        short = [t if n <= limit else f"[long token {i}]"
                 for i, (t, n) in enumerate(zip(tokens, sizes))]
        self.normalizer, self.wordpiece = _fast_ops(do_lower_case, short, unk_token,
                                                    strip_accents)
        # WordPiece for the exact path's words (up to 800 bytes). FastWordpiece holds tokens of
        # up to 256 bytes; a vocab with longer ones keeps the table-based op (None here).
        self.word_wordpiece = None
        if max(sizes) <= 256:
            self.word_wordpiece = tf_text.FastWordpieceTokenizer(
                tokens, suffix_indicator="##", max_bytes_per_word=MAX_EXACT_WORD_BYTES,
                token_out_type=tf.int64, unknown_token=unk_token, no_pretokenization=True,
                support_detokenization=False)
        # A word's first piece is never a "##" token (a word cannot start with "#", which is
        # punctuation); every later piece is one.
        self._unk_id = tf.constant(list(tokens).index(unk_token), tf.int64)
        self._first = tf.constant([not (t.startswith("##") and len(t) > 2) for t in tokens])

    def normalize(self, x):
        """The casing's fast normalizer: FastBertNormalize (uncased), StringLower (lower-case,
        accents kept), nothing (cased)."""
        return self.normalizer.normalize(x)

    def words(self, text, by_word=True):
        """WordPiece ids of normalized text, grouped by word.

        Args:
            text: string [n], already `normalize`d.
            by_word: group pieces by word; False skips the regrouping.

        Returns:
            (int64 RaggedTensor [n, words, pieces] ([n, pieces] unless by_word), bool per
            piece: the piece is a word over MAX_WORD_BYTES, whose ids are not the original's).
        """
        ids = self.wordpiece.tokenize(text)
        # A word over the byte limit comes out as one [UNK]: only a batch with an [UNK] needs
        # the offsets (a second, rare pass) to tell it from a word the vocab cannot spell.
        unk = tf.equal(ids.values, self._unk_id)
        too_long = tf.cond(tf.reduce_any(unk), lambda: self._too_long(text, unk),
                           lambda: tf.zeros_like(unk))
        if not by_word:
            return ids, too_long
        flat = ids.values
        # Word boundaries: before every first piece, and at the end.
        bounds = tf.concat([tf.gather(self._first, flat), [True]], 0)
        piece_splits = tf.reshape(tf.where(bounds), [-1])
        words_before = tf.cumsum(tf.cast(bounds, tf.int64), exclusive=True)
        words = tf.RaggedTensor.from_nested_row_splits(
            flat, [tf.gather(words_before, ids.row_splits), piece_splits], validate=False)
        return words, too_long

    def _too_long(self, text, unk):
        _, starts, ends = self.wordpiece.tokenize_with_offsets(text)
        return unk & (ends.values - starts.values > MAX_WORD_BYTES)

    def tokenize(self, x):
        """x: string [n] -> (int64 RaggedTensor [n, words, pieces], bool [n]: the row has a
        word over MAX_WORD_BYTES)."""
        words, too_long = self.words(self.normalize(x))
        piece_splits = tf.gather(words.values.row_splits, words.row_splits)
        count = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(tf.cast(too_long, tf.int64))], 0)
        count = tf.gather(count, piece_splits)
        return words, count[1:] > count[:-1]
