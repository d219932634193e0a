"""Character tables of the original tokenizer for in-graph use, and the in-graph final sigma.

Classes are generated from Python's `unicodedata`, i.e. from the very tables the Python tokenizer
uses (RE2's own \\p{..} tables and ICU follow other Unicode versions), as RE2 character classes
or code point masks. Where ICU (tf.strings.lower) differs, probes find the characters:
`case_fixups` (case mappings newer than ICU's) and `sigma_risky_class` (Cased/Case_Ignorable).
"""
import functools
import unicodedata

import numpy as np
import tensorflow as tf

from bert_tf.tokenization import probe_cache
from bert_tf.tokenization import wordpiece as tokenization

# Python control flow here is static (config, not tensors): skip autograph's slow conversion.
_no_autograph = tf.autograph.experimental.do_not_convert

_SIGMA = "\u03A3"
_NUM_CPS = 0x110000


@functools.lru_cache(maxsize=None)
def _categories():
    """numpy array: general category (2-letter str) of every code point."""
    return np.array([unicodedata.category(chr(cp)) for cp in range(_NUM_CPS)], dtype="U2")


def _mask_ranges(mask):
    """Inclusive (lo, hi) runs of True in a bool mask over all code points (surrogates excluded:
    they never occur in valid UTF-8 and RE2 rejects them)."""
    mask = mask.copy()
    mask[0xD800:0xE000] = False
    edges = np.flatnonzero(np.diff(np.concatenate([[False], mask, [False]]).astype(np.int8)))
    return [(int(lo), int(hi) - 1) for lo, hi in zip(edges[::2], edges[1::2])]


def _re2_class(ranges):
    parts = []
    for lo, hi in ranges:
        parts.append(f"\\x{{{lo:X}}}" if lo == hi else f"\\x{{{lo:X}}}-\\x{{{hi:X}}}")
    return "[" + "".join(parts) + "]"


@functools.lru_cache(maxsize=None)
def _deleted_mask():
    cats = _categories()
    mask = np.char.startswith(cats, "C")  # tokenization._is_control, unassigned (Cn) included
    mask[[0x09, 0x0A, 0x0D]] = False
    mask[[0x00, 0xFFFD]] = True
    return mask


@functools.lru_cache(maxsize=None)
@probe_cache.cached()
def char_classes():
    """Dict of RE2 character classes: delete, space, cjk, punct, mn."""
    cats = _categories()
    deleted = _deleted_mask()
    space = cats == "Zs"
    # Whitespace to the original = what survives cleaning and str.split() still splits on
    # (str.isspace: \\t \\n \\r, Zs, and U+2028/U+2029).
    space[[cp for cp in range(_NUM_CPS) if chr(cp).isspace()]] = True
    space &= ~deleted
    punct = np.char.startswith(cats, "P")
    for lo, hi in ((33, 47), (58, 64), (91, 96), (123, 126)):
        punct[lo:hi + 1] = True
    return {
        "delete": _re2_class(_mask_ranges(deleted)),
        "space": _re2_class(_mask_ranges(space)),
        "cjk": _re2_class(sorted(tokenization._CJK_RANGES)),
        "punct": _re2_class(_mask_ranges(punct)),
        "mn": _re2_class(_mask_ranges(cats == "Mn")),
    }


@functools.lru_cache(maxsize=None)
@probe_cache.cached(lambda v: tuple(tuple(p) for p in v))
def case_fixups():
    """(char, Python's lower-case) for chars ICU's StringLower maps differently (newer Unicode).

    Applied before StringLower; ICU leaves the (to it unknown) results alone.
    """
    deleted = _deleted_mask()
    cased = [cp for cp in range(0x80, _NUM_CPS)
             if not deleted[cp] and not 0xD800 <= cp <= 0xDFFF and chr(cp).lower() != chr(cp)]
    with tf.init_scope():
        icu = tf.strings.lower([chr(cp) for cp in cased], encoding="utf-8").numpy()
    return tuple((chr(cp), chr(cp).lower()) for cp, low in zip(cased, icu)
                 if low.decode("utf-8") != chr(cp).lower())


@functools.lru_cache(maxsize=None)
@probe_cache.cached(lambda v: tuple(tuple(p) for p in v))  # a Python loop over all code points
def _sigma_context_tables():
    """(starts, ends) ranges of Cased and of Case_Ignorable as Python's str.lower sees them.

    Cased is read off str.islower/isupper/istitle. Case_Ignorable (not exposed by unicodedata)
    is probed through str.lower's own final-sigma rule, on the categories it can contain
    (Mn Me Cf Lm Sk, and P* for the Word_Break MidLetter/MidNumLet/Single_Quote characters).
    """
    cats = _categories()
    probe = np.isin(cats, ["Mn", "Me", "Cf", "Lm", "Sk", "Po", "Pi", "Pf", "Pd", "Pc"])
    cased = np.zeros(_NUM_CPS, bool)
    ignorable = np.zeros(_NUM_CPS, bool)
    for cp in range(_NUM_CPS):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if c.islower() or c.isupper() or c.istitle():
            cased[cp] = True
            # Sigma preceded by c only: stays non-final iff c is skipped as case-ignorable.
            ignorable[cp] = probe[cp] and ("-" + c + _SIGMA).lower()[-1] == "\u03C3"
        elif probe[cp]:
            # Sigma followed by c then a cased letter: non-final iff c is skipped.
            ignorable[cp] = ("A" + _SIGMA + c + "B").lower()[1] == "\u03C3"

    def split(ranges):
        return [lo for lo, _ in ranges], [hi for _, hi in ranges]
    return split(_mask_ranges(cased)), split(_mask_ranges(ignorable))


@functools.lru_cache(maxsize=None)
@probe_cache.cached()
def sigma_risky_class():
    """RE2 class of the characters next to which ICU's final-sigma rule may differ from
    Python's: those ICU reads as Cased / Case_Ignorable differently (another Unicode version).

    Probed through both lower-casings: "cΣ" (c cased), "AΣcB" (c skipped), "AcΣ" (c cased or
    skipped). Only rows with capital sigma and such a character need `_resolve_capital_sigma`.
    """
    cats = _categories()
    cps = [cp for cp in range(_NUM_CPS) if not cats[cp].startswith("C")]
    probes = []
    for cp in cps:
        c = chr(cp)
        probes += [c + _SIGMA, "A" + _SIGMA + c + "B", "A" + c + _SIGMA]
    with tf.init_scope():
        icu = tf.strings.lower(probes, encoding="utf-8").numpy()
    differs = np.array([a != b.lower().encode("utf-8") for a, b in zip(icu, probes)])
    risky = np.zeros(_NUM_CPS, bool)
    risky[np.array(cps)[differs.reshape(-1, 3).any(axis=1)]] = True
    return _re2_class(_mask_ranges(risky))


def _in_ranges(cps, ranges):
    starts = tf.constant(ranges[0], tf.int32)
    ends = tf.constant(ranges[1], tf.int32)
    idx = tf.searchsorted(starts, cps, side="right") - 1
    return (idx >= 0) & (cps <= tf.gather(ends, tf.maximum(idx, 0)))


@_no_autograph
def _resolve_capital_sigma(x):
    """Lower-cases U+03A3 like Python's str.lower (final sigma rule, Python's Unicode tables).

    Final form iff preceded by a cased char and not followed by one, skipping case-ignorables.
    Rows are separate strings; spaces (neither cased nor ignorable) bound the context like the
    original's per-word lower-casing.
    """
    cased_r, ignorable_r = _sigma_context_tables()
    cps = tf.strings.unicode_decode(x, "UTF-8")
    flat = cps.flat_values
    n = tf.size(flat)
    row = tf.cast(cps.value_rowids(), tf.int32)
    pos = tf.range(n)
    cased = _in_ranges(flat, cased_r)
    # Anchors: where the context scan stops. A sentinel past the end keeps gathers in range.
    anchors = tf.concat([tf.boolean_mask(pos, ~_in_ranges(flat, ignorable_r)), [n]], 0)
    row_ext = tf.concat([row, [-1]], 0)
    cased_ext = tf.concat([cased, [False]], 0)
    before = tf.searchsorted(anchors, pos, side="left")  # anchors strictly before i
    prev = tf.gather(anchors, tf.maximum(before - 1, 0))
    prev_cased = (before > 0) & tf.gather(cased_ext, prev) & (tf.gather(row_ext, prev) == row)
    nxt = tf.gather(anchors, tf.searchsorted(anchors, pos, side="right"))
    next_cased = tf.gather(cased_ext, nxt) & (tf.gather(row_ext, nxt) == row)
    lowered = tf.where(prev_cased & ~next_cased, 0x3C2, 0x3C3)
    flat = tf.where(tf.equal(flat, ord(_SIGMA)), lowered, flat)
    return tf.strings.unicode_encode(cps.with_flat_values(flat), "UTF-8")


