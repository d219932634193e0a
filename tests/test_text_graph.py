"""In-graph tokenizer/packer == Python FullTokenizer + the original's packing; TF-Serving-safe ops."""
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import bert_tf
import keras
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf import tokenization

from bert_tf.export import serving_ops

from bert_tf.tokenization import text_graph

from bert_tf.tokenization import vocab_builder
from conftest import original_pack

DATA = os.path.join(os.path.dirname(__file__), "data", "sample_text.txt")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def sample_lines():
    with open(DATA, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


EDGE_CASES = [
    "", " ", "\t\n\r ", "\x00", "\ufffd",
    "ab\x00cd\ufffdef\x07gh\u200bij\u00adkl\ue000mn x\U000E0080y",
    "a\x0bb\x0cc\x1cd\x1fe\x85f",
    "one\u2028two\u2029three", "a\u00a0b\u3000c\u2009d\u202fe",
    "Zoë Bézier FAÇADE Kraków Tōkyō naïve Be\u0301zier ZOË",
    "ﬁne Straße ½ İstanbul I ı",
    "ΟΔΟΣ ΣΑΣ. Άλφα ΣΣ Σ AΣ'B A'Σ' Σ\u0301 ΑΣ\u0345",
    "我爱中文abc x\U00020000y\uF900z 灯台守の夜",
    "ありがとう、ひかり。カナ 한국",
    "hi🙂there 🎄🌊🏠 👍🏽 👨\u200d👩 ❤\ufe0f",
    "x\u2014y\u2013z “ok” ‘no’ «oui»… a，b¿c €1×2©",
    "a$b+c<d=e>f^g`h|i~j (0)1234 567-890 3.14",
    "the" * 66 + "ab", "the" * 67, "é" * 200, "é" * 201, "Zoë" * 67,
    # Newer case mappings than ICU's (Unicode 14), and a Unicode 14 mark next to capital sigma.
    "\u2C2F\uA7C0 \U00010570x AΣ\u0898 ΑΣ\u1734B",
    "unwanted running wanted",
]


def to_lists(rt):
    """RaggedTensor -> nested lists (RaggedTensor.to_list() takes seconds per thousand rows)."""
    values = rt.flat_values.numpy().tolist()
    splits = [s.numpy().tolist() for s in rt.nested_row_splits]

    def build(level, lo, hi):
        if level == len(splits):
            return values[lo:hi]
        s = splits[level]
        return [build(level + 1, s[i], s[i + 1]) for i in range(lo, hi)]
    return build(0, 0, len(splits[0]) - 1)


def py_ids_by_word(tok, text):
    return [tok.convert_tokens_to_ids(tok.wordpiece_tokenizer.tokenize(w))
            for w in tok.basic_tokenizer.tokenize(text)]


_TRACED = {}  # id(tokenizer) -> (tokenizer, tf.function): trace once per tokenizer, not per call


def traced_tokenize(tg):
    if id(tg) not in _TRACED:
        _TRACED[id(tg)] = (tg, tf.function(tg.tokenize,
                                           input_signature=[tf.TensorSpec([None], tf.string)]))
    return _TRACED[id(tg)][1]


def graph_ids_by_word(tg, texts):
    return to_lists(traced_tokenize(tg)(tf.constant(texts)))


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def tokenizers(request, tmp_path_factory):
    """(do_lower_case, FullTokenizer, BertTextTokenizer) on a vocab learned from the sample text,
    small enough for many multi-piece words, with q/x/🙂/の removed so some words are [UNK]."""
    lower = request.param
    d = tmp_path_factory.mktemp("vocab")
    tokens = vocab_builder.learn_vocab(DATA, str(d / "learned.txt"), vocab_size=300,
                                       do_lower_case=lower)
    kept = [t for t in tokens if not any(c in t for c in "qxQX🙂の")]
    path = str(d / "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in kept))
    return (lower, tokenization.FullTokenizer(path, do_lower_case=lower),
            text_graph.BertTextTokenizer(path, do_lower_case=lower))


def test_sample_text_ids_match_python(tokenizers):
    lower, py, tg = tokenizers
    lines = sample_lines()
    # The fixture is a real multi-paragraph text with what breaks naive tokenizers in it.
    text = "\n".join(lines)
    for needle in ("\u201c", "\u2014", "\u2013", "Zoë", "É", "ﬁ", "Straße", "İzmir", "ΟΔΥΣΣΕΥΣ",
                   "灯台守", "ありがとう", "등대", "🙂", "👍🏽", "\u200d", "\u200b", "\u00ad", "\x1b",
                   "\x07", "\x0c", "\ufffd", "\u2028", "\u00a0", "\u3000", "\t", "ＷＥＬＣＯＭＥ"):
        assert needle in text, needle
    got = graph_ids_by_word(tg, lines)
    assert got == [py_ids_by_word(py, line) for line in lines]
    # Whole-text ids equal FullTokenizer.tokenize + convert_tokens_to_ids, paragraph by paragraph.
    paragraphs = text.split("\n\n")
    flat = traced_tokenize(tg)(tf.constant(paragraphs)).merge_dims(1, 2)
    assert to_lists(flat) == [py.convert_tokens_to_ids(py.tokenize(p)) for p in paragraphs]
    # The fixture really exercises WordPiece: multi-piece words and [UNK]s.
    flat_words = [w for row in got for w in row]
    assert sum(len(w) > 1 for w in flat_words) > 200
    assert 5 <= sum(w == [py.vocab["[UNK]"]] for w in flat_words) <= 40


def test_edge_cases_match_python(tokenizers):
    lower, py, tg = tokenizers
    assert graph_ids_by_word(tg, EDGE_CASES) == [py_ids_by_word(py, t) for t in EDGE_CASES]


def test_pieces_match_python(tokenizers):
    lower, py, tg = tokenizers
    texts = sample_lines()[:8] + EDGE_CASES
    got = to_lists(tg.tokenize_to_pieces(tf.constant(texts)))
    got = [[[p.decode("utf-8") for p in w] for w in row] for row in got]
    assert got == [[py.wordpiece_tokenizer.tokenize(w) for w in py.basic_tokenizer.tokenize(t)]
                   for t in texts]


def test_invalid_utf8_dropped_like_python(tokenizers):
    lower, py, tg = tokenizers
    raw = [b"ab\xffcd \xe4\xb8", b"\xed\xa0\x80x", b"Zo\xc3\xab\xc3"]
    assert graph_ids_by_word(tg, raw) == [py_ids_by_word(py, r) for r in raw]


def test_random_strings_match_python(tokenizers):
    lower, py, tg = tokenizers
    pool = (list("abcxyzABCXYZ019 .,'-:$^`") + list("ΣσςΑΟ") + list("éëÉŁßİı")
            + ["\u0301", "\u0345", "\u0898", "\u00ad", "\u200b", "\u200d", "\x00", "\x07",
               "\x1c", "\x85", "\t", "\n", "\u2028", "\u00a0", "\u3000", "\ufffd", "\ue000",
               "\u2C2F", "\U00010570", "中", "文", "か", "が", "カ", "한", "🙂", "🏽", "—",
               "“", "«", "…", "，", "€", "\U000E0080", "\ufe0f"])
    rng = random.Random(1234)
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(0, 24))) for _ in range(2000)]
    got = graph_ids_by_word(tg, texts)
    want = [py_ids_by_word(py, t) for t in texts]
    mismatches = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    assert mismatches == []


def test_shapes_and_special_ids(tokenizers):
    lower, py, tg = tokenizers
    out = tg.tokenize(tf.constant(["Hello there", ""]))
    assert isinstance(out, tf.RaggedTensor) and out.dtype == tf.int64 and out.ragged_rank == 2
    assert out.shape[0] == 2 and out[1].shape[0] == 0
    assert (tg.cls_id, tg.sep_id, tg.mask_id, tg.unk_id, tg.pad_id) == tuple(
        py.vocab[t] for t in ("[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]"))
    assert tg.vocab_size == len(tokenization.vocab_tokens(py.vocab_file))
    assert all(isinstance(v, int) for v in (tg.cls_id, tg.sep_id, tg.vocab_size))
    # A scalar string is a batch of one.
    assert to_lists(tg.tokenize(tf.constant("Hello"))) == [py_ids_by_word(py, "Hello")]


def test_fast_and_exact_rows_mixed_in_one_batch(tokenizers):
    lower, py, tg = tokenizers
    plain = ["The keeper trimmed the wicks, polished the lens.", "Zoë wrote: “ok” — 42%", ""]
    odd = ["bell\x07here", "ΟΔΥΣΣΕΥΣ ΣΑΣ", "ab\u200bcd", "Stra\u00dfe \ufb01ne ½"]
    fast = tf.strings.regex_full_match(tf.constant(plain + odd), tg._fast_re).numpy().tolist()
    # Plain prose takes the Fast ops; deleted characters take the exact path; the rest depends
    # on the case (FastBertNormalize folds ß/ﬁ/½ and knows no final sigma when lower-casing).
    assert fast[:3] == [True] * 3 and fast[3:5] == [False, not lower]
    texts = [t for pair in zip(plain + plain[:1], odd) for t in pair]  # interleaved rows
    assert graph_ids_by_word(tg, texts) == [py_ids_by_word(py, t) for t in texts]
    flat = to_lists(tf.function(tg.tokenize_flat)(tf.constant(texts)))
    assert flat == [py.convert_tokens_to_ids(py.tokenize(t)) for t in texts]


LONG_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "\u0436\u0436", "##\u0436\u0436",
              "##\u0436", "word", "##s"]


@pytest.mark.parametrize("lower,strip", [(True, None), (False, None), (True, False)])
def test_words_over_200_bytes_but_not_200_chars(lower, strip, tmp_path):
    """The Fast op's limit is in bytes: a word of 101..200 two-byte characters is still
    WordPiece'd (the original counts characters); 201 characters -> [UNK]."""
    path = tmp_path / "v.txt"
    path.write_text("".join(t + "\n" for t in LONG_VOCAB), encoding="utf-8")
    py = tokenization.FullTokenizer(str(path), do_lower_case=lower, strip_accents=strip)
    tg = text_graph.BertTextTokenizer(str(path), do_lower_case=lower, strip_accents=strip)
    fn = traced_tokenize(tg)
    for texts in (["\u0436" * 101], ["\u0436" * 200, "words"], ["words \u0436" * 201, "word"]):
        want = [py_ids_by_word(py, t) for t in texts]
        assert graph_ids_by_word(tg, texts) == want
        assert to_lists(fn(tf.constant(texts))) == want
    assert len(py_ids_by_word(py, "\u0436" * 200)[0]) == 100


def test_vocab_without_plain_words_and_with_long_tokens(tmp_path):
    # FastWordpiece refuses a vocab of bracketed tokens only: the exact path does it all.
    path = tmp_path / "v.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")
    tg = text_graph.BertTextTokenizer(str(path))
    assert tg._fast is None
    assert graph_ids_by_word(tg, ["Hello, world", ""]) == [[[1], [1], [1]], []]
    # A 300-byte token (over FastWordpiece's 256) still matches its 150-character word.
    long_token = "\u0436" * 150
    path = tmp_path / "long.txt"  # a new name: TF shares a file-initialized table by file name
    path.write_text("".join(t + "\n" for t in LONG_VOCAB + [long_token]), encoding="utf-8")
    py = tokenization.FullTokenizer(str(path))
    tg = text_graph.BertTextTokenizer(str(path))
    assert tg._fast is not None and tg._fast.word_wordpiece is None
    texts = [long_token + " words", "\u0436" * 151]
    assert graph_ids_by_word(tg, texts) == [[[10], [8, 9]], [[10, 7]]]
    assert graph_ids_by_word(tg, texts) == [py_ids_by_word(py, t) for t in texts]


REF_VOCAB = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing", ",",
             "[MASK]"]


def test_reference_vectors_in_graph(tmp_path):
    """The original release's tokenizer test vectors (ids 0..10; [MASK] appended as id 11)."""
    path = tmp_path / "vocab.txt"
    path.write_text("".join(t + "\n" for t in REF_VOCAB), encoding="utf-8")
    lower = text_graph.BertTextTokenizer(str(path), do_lower_case=True)
    cased = text_graph.BertTextTokenizer(str(path), do_lower_case=False)

    def ids(tg, text):
        return tg.tokenize(tf.constant([text])).merge_dims(1, 2).to_list()[0]

    def words(tg, text):
        return [w.decode("utf-8") for w in tg.basic_tokenize(tf.constant([text])).flat_values.numpy()]

    assert ids(lower, "UNwant\u00E9d,running") == [7, 4, 5, 10, 8, 9]
    assert ids(lower, "unwantedX running") == [0, 8, 9]
    assert ids(lower, "") == [] and ids(cased, "") == []
    assert words(lower, "ah\u535A\u63A8zz") == ["ah", "\u535A", "\u63A8", "zz"]
    assert words(lower, " \tHeLLo!how  \n Are yoU?  ") == ["hello", "!", "how", "are", "you", "?"]
    assert words(cased, " \tHeLLo!how  \n Are yoU?  ") == ["HeLLo", "!", "how", "Are", "yoU", "?"]
    assert words(lower, "H\u00E9llo") == ["hello"]
    assert words(cased, "H\u00E9llo") == ["H\u00E9llo"]
    assert lower.unk_id == 0 and (lower.cls_id, lower.sep_id, lower.mask_id) == (1, 2, 11)


def test_non_canonical_vocab_file(tmp_path):
    # CRLF, a trailing space, an empty line and a duplicate (later wins): TextFileInitializer
    # alone would read these differently from load_vocab (or refuse them).
    lines = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello ", "", "world", "##s",
             "world", "\ta\u2028b"]
    path = tmp_path / "vocab.txt"
    path.write_bytes("".join(l + "\r\n" for l in lines).encode("utf-8"))
    py = tokenization.FullTokenizer(str(path))
    tg = text_graph.BertTextTokenizer(str(path))
    assert py.convert_tokens_to_ids(["hello", "world", "##s"]) == [5, 9, 8]
    texts = ["hello worlds", "Hello, world!", "hellos"]
    assert graph_ids_by_word(tg, texts) == [[[5], [9, 8]], [[5], [1], [9], [1]], [[5, 8]]]
    assert graph_ids_by_word(tg, texts) == [py_ids_by_word(py, t) for t in texts]
    assert tg.vocab_size == 11


def test_temporary_vocab_files_go_with_their_tokenizer(tmp_path):
    """A layer built from a token list (every .keras load) and a non-canonical vocab file each
    write a vocab file to a temporary folder: it stays while its tokenizer lives (a SavedModel
    export copies it) and is removed when the tokenizer is collected, not left in /tmp."""
    import gc
    import os
    layer = text_graph.BertPreprocessingLayer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])
    folder = os.path.dirname(layer.tokenizer.vocab_file)
    assert os.path.basename(folder).startswith("bert_tf_vocab_") and os.path.isdir(folder)
    assert layer.tokenizer.vocab_size == 6
    tokenizer = layer.tokenizer  # the tokenizer, not the layer, owns it
    del layer
    gc.collect()
    assert os.path.isdir(folder)
    if hasattr(os, "fork"):  # a forked child exiting (at-exit handlers run) leaves it alone
        code = ("import os, sys\n"
                "from bert_tf.tokenization import text_graph\n"
                "layer = text_graph.BertPreprocessingLayer(['[PAD]', '[UNK]', '[CLS]', '[SEP]',"
                " '[MASK]', 'a'])\n"
                "folder = os.path.dirname(layer.tokenizer.vocab_file)\n"
                "pid = os.fork()\n"
                "if pid == 0:\n"
                "    sys.exit(0)\n"
                "os.waitpid(pid, 0)\n"
                "print(os.path.isdir(folder), folder)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        alive, child_folder = out.stdout.split()
        assert alive == "True" and not os.path.exists(child_folder)  # gone at the parent's exit
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nx\nx\n")  # a duplicate: copied

    class Owner:
        pass
    owner = Owner()
    copy, lines = text_graph._canonical_vocab_file(str(path), owner)
    assert lines == 7 and copy != str(path) and os.path.isfile(copy)
    del tokenizer, owner
    gc.collect()
    assert not os.path.exists(folder) and not os.path.exists(os.path.dirname(copy))


def test_a_failing_tokenizer_leaves_no_vocab_folder(tmp_path, monkeypatch):
    import tempfile
    mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda prefix: mkdtemp(prefix=prefix, dir=tmp_path))

    def refuse(*args, **kwargs):
        raise bert_tf.BertError("refused")
    monkeypatch.setattr(text_graph, "BertTextTokenizer", refuse)
    with pytest.raises(bert_tf.BertError, match="refused"):
        text_graph.BertPreprocessingLayer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])
    assert os.listdir(tmp_path) == []


def test_bad_vocab_raises_bert_error(tmp_path):
    with pytest.raises(bert_tf.BertError, match="vocab file not found"):
        text_graph.BertTextTokenizer(str(tmp_path / "none.txt"))
    path = tmp_path / "v.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[MASK]\nx\n", encoding="utf-8")
    with pytest.raises(bert_tf.BertError) as e:
        text_graph.BertTextTokenizer(str(path))
    assert str(e.value) == f"{path}: vocab is missing required token(s) [SEP]"


@pytest.mark.slow
@pytest.mark.parametrize("lower,strip", [(True, None), (False, None), (True, False),
                                         (False, True)])
def test_every_code_point_matches_python(lower, strip, tmp_path):
    """Exhaustive: every code point alone, inside a word and next to capital sigma."""
    path = tmp_path / "v.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")
    tg = text_graph.BertTextTokenizer(str(path), do_lower_case=lower, strip_accents=strip)
    basic = tokenization.BasicTokenizer(do_lower_case=lower, strip_accents=strip)
    fn = tf.function(tg.basic_tokenize)
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    bad = []
    for i in range(0, len(cps), 100_000):
        texts = [f"a{chr(c)}b {chr(c)} A{chr(c)}\u03a3{chr(c)}" for c in cps[i:i + 100_000]]
        for t, g in zip(texts, to_lists(fn(tf.constant(texts)))):
            if [w.decode("utf-8") for w in g] != basic.tokenize(t):
                bad.append(t)
    assert bad == []


@pytest.mark.slow
@pytest.mark.parametrize("lower,strip", [(True, None), (False, None), (True, False)])
def test_fast_path_words_match_python_on_every_fast_code_point(lower, strip):
    """The fast path's words (read off FastWordpiece's offsets, every word [UNK]) equal the
    Python BasicTokenizer's for every code point the fast mask admits."""
    from bert_tf.tokenization import fast_path
    cps = np.flatnonzero(fast_path.fast_mask(lower, strip))
    texts = [f"a{chr(c)}b {chr(c)}" for c in cps]
    normalizer, wordpiece = fast_path._fast_ops(lower, ["[UNK]", "zz"], "[UNK]", strip)
    normed = normalizer.normalize(tf.constant(texts))
    _, starts, ends = wordpiece.tokenize_with_offsets(normed)
    normed, splits = normed.numpy(), starts.row_splits.numpy()
    starts, ends = starts.values.numpy(), ends.values.numpy()
    basic = tokenization.BasicTokenizer(do_lower_case=lower, strip_accents=strip)
    bad = []
    for i, t in enumerate(texts):
        lo, hi = splits[i], splits[i + 1]
        got = [normed[i][s:e].decode("utf-8") for s, e in zip(starts[lo:hi], ends[lo:hi])]
        if got != basic.tokenize(t):
            bad.append(t)
    assert len(cps) > 140_000 and bad == []


# ---------------------------------------------------------------------------------------------
# Lower-casing without accent stripping (keras-hub's BertTokenizer(lowercase=True), HF's
# strip_accents=False: StringLower on fast rows) and the reverse (no fast rows).

@pytest.fixture(scope="module", params=[(True, False), (False, True)],
                ids=["lower_keep_accents", "cased_strip_accents"])
def accent_tokenizers(request, tmp_path_factory):
    """(FullTokenizer, BertTextTokenizer) with strip_accents != do_lower_case, on a cased vocab
    learned from the sample text (it has accented tokens), q/x/🙂/の removed."""
    lower, strip = request.param
    d = tmp_path_factory.mktemp("accent_vocab")
    tokens = vocab_builder.learn_vocab(DATA, str(d / "learned.txt"), vocab_size=400,
                                       do_lower_case=False)
    kept = [t for t in tokens if not any(c in t for c in "qxQX🙂の")]
    path = str(d / "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in kept))
    return (tokenization.FullTokenizer(path, do_lower_case=lower, strip_accents=strip),
            text_graph.BertTextTokenizer(path, do_lower_case=lower, strip_accents=strip))


def test_accent_casings_match_python(accent_tokenizers):
    py, tg = accent_tokenizers
    assert tg._fast is not None and (tg._fast_re is None) == (not tg.do_lower_case)
    if tg.do_lower_case:  # plain accented prose is fast; the rest takes the exact steps
        fast = tf.strings.regex_full_match(tf.constant(
            ["Café crème Ångström 中文, ok", "ΟΔΥΣΣΕΥΣ", "bell\x07", "Straße"]), tg._fast_re)
        assert fast.numpy().tolist() == [True, False, False, True]
    lines = sample_lines()
    assert graph_ids_by_word(tg, lines) == [py_ids_by_word(py, line) for line in lines]
    paragraphs = "\n".join(lines).split("\n\n")
    flat = to_lists(tf.function(tg.tokenize_flat)(tf.constant(paragraphs)))
    assert flat == [py.convert_tokens_to_ids(py.tokenize(p)) for p in paragraphs]
    assert graph_ids_by_word(tg, EDGE_CASES) == [py_ids_by_word(py, t) for t in EDGE_CASES]
    raw = [b"ab\xffcd \xe4\xb8", b"\xed\xa0\x80x", b"Zo\xc3\xab\xc3"]
    assert graph_ids_by_word(tg, raw) == [py_ids_by_word(py, r) for r in raw]
    texts = lines[:8] + EDGE_CASES
    got = to_lists(tg.tokenize_to_pieces(tf.constant(texts)))
    assert [[[p.decode("utf-8") for p in w] for w in row] for row in got] == [
        [py.wordpiece_tokenizer.tokenize(w) for w in py.basic_tokenizer.tokenize(t)]
        for t in texts]
    # The casing matters on this text: the original's both-or-neither gives other ids.
    both = tokenization.FullTokenizer(py.vocab_file, do_lower_case=py.basic_tokenizer.do_lower_case)
    assert sum(py_ids_by_word(py, t) != py_ids_by_word(both, t) for t in lines) >= 5


def test_accent_casings_random_strings_match_python(accent_tokenizers):
    py, tg = accent_tokenizers
    pool = (list("abcxyzABCXYZ019 .,'-:") + list("ΣσςΑΟ") + list("éëÉŁßİıÅåñÑ")
            + ["e\u0301", "\u0301", "\u0345", "\u0898", "\u00ad", "\u200b", "\x00", "\x07",
               "\t", "\u2028", "\u00a0", "\ufffd", "\u2C2F", "\U00010570", "中", "文", "か",
               "が", "한", "🙂", "—", "“", "，", "\ufe0f", "ﬁ", "½", "Ｗ"])
    rng = random.Random(99)
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(0, 20))) for _ in range(1000)]
    got = graph_ids_by_word(tg, texts)
    want = [py_ids_by_word(py, t) for t in texts]
    assert [(t, g, w) for t, g, w in zip(texts, got, want) if g != w] == []


ACCENT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "café", "cafe", "crème", "creme",
                "brûlée", "brulee", "ångström", "angstrom", "naïve", "naive", "résumé",
                "resume", "Café", "Cafe", "中", "文", "##s", ",", "CAFE", "Ångström"]


@pytest.mark.parametrize("lower,strip,want", [
    (True, False, [[[5], [7], [9]], [[11, 21], [13], [15], [15], [19], [20], [22], [6]]]),
    (True, None, [[[6], [8], [10]], [[12, 21], [14], [16], [16], [19], [20], [22], [6]]]),
    (False, True, [[[18], [8], [10]], [[1], [14], [1], [16], [19], [20], [22], [23]]]),
    (False, False, [[[17], [7], [9]], [[24, 21], [13], [1], [15], [19], [20], [22], [23]]]),
])
def test_casings_exact_ids(lower, strip, want, tmp_path):
    """Hand-checked ids of accented, mixed-case and CJK text for each casing."""
    path = tmp_path / f"v{lower}{strip}.txt"
    path.write_text("".join(t + "\n" for t in ACCENT_VOCAB), encoding="utf-8")
    tg = text_graph.BertTextTokenizer(str(path), do_lower_case=lower, strip_accents=strip)
    py = tokenization.FullTokenizer(str(path), do_lower_case=lower, strip_accents=strip)
    texts = ["Café crème brûlée", "Ångströms naïve RÉSUMÉ résumé 中文, CAFE"]
    got = graph_ids_by_word(tg, texts)
    assert got == want
    assert got == [py_ids_by_word(py, t) for t in texts]


def test_accent_casing_ops_are_serving_safe(accent_tokenizers):
    py, tg = accent_tokenizers
    fn = tf.function(lambda x: text_graph.pack_inputs([tg.tokenize(x)], 16, tg.cls_id,
                                                      tg.sep_id),
                     input_signature=[tf.TensorSpec([None], tf.string)])
    ops = serving_ops.ops_in_concrete_function(fn.get_concrete_function())
    serving_ops.check_serving_safe(ops)
    assert "FastWordpieceTokenizeWithOffsets" in ops and "FastBertNormalize" not in ops
    assert ("NormalizeUTF8" in ops) == tg.strip_accents
    assert ("StringLower" in ops) == tg.do_lower_case


def test_preprocessing_layer_strip_accents_config(accent_tokenizers, tmp_path):
    py, tg = accent_tokenizers
    lower, strip = tg.do_lower_case, tg.strip_accents
    layer = text_graph.BertPreprocessingLayer(py.vocab_file, lower, 16, strip_accents=strip)
    config = layer.get_config()
    assert (config["do_lower_case"], config["strip_accents"], config["seq_length"]) == (
        lower, strip, 16)
    clone = text_graph.BertPreprocessingLayer.from_config(config)
    assert (clone.tokenizer.do_lower_case, clone.tokenizer.strip_accents) == (lower, strip)
    texts = ["Café crème brûlée", "Ångström naïve résumé", "ZOË 灯台守 Kraków"]
    want = [py_pack(py.convert_tokens_to_ids(py.tokenize(t)), None, 16, tg.cls_id, tg.sep_id)[0]
            for t in texts]
    assert clone(tf.constant(texts))["input_word_ids"].numpy().tolist() == want
    # A .keras file keeps the casing.
    inp = keras.Input(shape=(), dtype="string")
    keras.Model(inp, layer(inp)).save(str(tmp_path / "pre.keras"))
    again = keras.models.load_model(str(tmp_path / "pre.keras"))
    assert again(tf.constant(texts))["input_word_ids"].numpy().tolist() == want
    # Configs saved before strip_accents existed load with the original's casing.
    del config["strip_accents"]
    old = text_graph.BertPreprocessingLayer.from_config(config)
    assert (old.tokenizer.do_lower_case, old.tokenizer.strip_accents) == (lower, lower)


@pytest.mark.slow
def test_turkish_locale_does_not_change_lower_casing(tmp_path):
    # ICU lower-cases with the process locale (tr: I -> ı); ASCII is lower-cased first to avoid it.
    path = tmp_path / "v.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")
    code = ("import bert_tf, tensorflow as tf; from bert_tf.tokenization import text_graph as t; "
            f"k = t.BertTextTokenizer({str(path)!r}); "
            "print(repr([w.decode() for w in k.basic_tokenize(tf.constant(['IRAK İzmir'])).flat_values.numpy()]))")
    env = dict(os.environ, LC_ALL="tr_TR.UTF-8", LANG="tr_TR.UTF-8")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    assert out == repr(["irak", "izmir"])


# ---------------------------------------------------------------------------------------------
# pack_inputs

py_pack = original_pack  # conftest: the original's packing, written from its rules


def pack(segments, seq_length, cls=101, sep=102):
    out = text_graph.pack_inputs(
        [tf.ragged.constant(s, dtype=tf.int64) for s in segments], seq_length, cls, sep)
    assert all(v.dtype == tf.int32 and v.shape == (len(segments[0]), seq_length)
               for v in out.values())
    return {k: v.numpy().tolist() for k, v in out.items()}


def test_pack_single_exact():
    out = pack([[[5, 6, 7], [8], []]], 6)
    assert out["input_word_ids"] == [[101, 5, 6, 7, 102, 0], [101, 8, 102, 0, 0, 0],
                                     [101, 102, 0, 0, 0, 0]]
    assert out["input_mask"] == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]]
    assert out["input_type_ids"] == [[0] * 6] * 3


def test_pack_single_truncation():
    out = pack([[list(range(1, 11))]], 5)
    assert out["input_word_ids"] == [[101, 1, 2, 3, 102]]
    assert out["input_mask"] == [[1] * 5]


def test_pack_pair_exact():
    out = pack([[[5, 6], [7]], [[8, 9, 10], [11]]], 9)
    assert out["input_word_ids"] == [[101, 5, 6, 102, 8, 9, 10, 102, 0],
                                     [101, 7, 102, 11, 102, 0, 0, 0, 0]]
    assert out["input_mask"] == [[1] * 8 + [0], [1] * 5 + [0] * 4]
    assert out["input_type_ids"] == [[0, 0, 0, 0, 1, 1, 1, 1, 0], [0, 0, 0, 1, 1, 0, 0, 0, 0]]


def test_pack_pair_truncation_pops_longer_ties_pop_b():
    # seq 8 -> budget 5. (4, 4): b, a, b popped -> a 3, b 2. (7, 1): a cut to 4. (1, 7): b to 4.
    out = pack([[[1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7], [1]],
                [[11, 12, 13, 14], [11], [11, 12, 13, 14, 15, 16, 17]]], 8)
    assert out["input_word_ids"] == [[101, 1, 2, 3, 102, 11, 12, 102],
                                     [101, 1, 2, 3, 4, 102, 11, 102],
                                     [101, 1, 102, 11, 12, 13, 14, 102]]
    assert out["input_type_ids"] == [[0, 0, 0, 0, 0, 1, 1, 1],
                                     [0, 0, 0, 0, 0, 0, 1, 1],
                                     [0, 0, 0, 1, 1, 1, 1, 1]]


def test_pack_pair_with_empty_b_is_single_like_the_original():
    out = pack([[[1, 2, 3, 4, 5, 6, 7]], [[]]], 6)
    assert out["input_word_ids"] == [[101, 1, 2, 3, 4, 102]]
    assert out["input_type_ids"] == [[0] * 6]


def test_pack_matches_original_rules_exhaustively():
    rng = random.Random(7)
    for seq_length in (3, 4, 5, 8, 13):
        a_rows, b_rows, want = [], [], []
        for la in range(0, 12):
            for lb in range(0, 12):
                a = [rng.randint(1, 99) for _ in range(la)]
                b = [rng.randint(1, 99) for _ in range(lb)]
                a_rows.append(a)
                b_rows.append(b)
                want.append(py_pack(a, b, seq_length))
        out = pack([a_rows, b_rows], seq_length)
        got = list(zip(out["input_word_ids"], out["input_mask"], out["input_type_ids"]))
        assert [tuple(map(list, g)) for g in got] == [tuple(w) for w in want]


def test_pack_accepts_word_level_ragged_and_dense():
    words = tf.ragged.constant([[[5, 6], [7]], [[8]]], dtype=tf.int64)  # [batch, words, pieces]
    flat = tf.constant([[5, 6, 7]], dtype=tf.int64)
    assert text_graph.pack_inputs([words], 6, 1, 2)["input_word_ids"].numpy().tolist() == [
        [1, 5, 6, 7, 2, 0], [1, 8, 2, 0, 0, 0]]
    assert text_graph.pack_inputs([flat], 6, 1, 2)["input_word_ids"].numpy().tolist() == [
        [1, 5, 6, 7, 2, 0]]


def test_pack_errors():
    seg = tf.ragged.constant([[1]], dtype=tf.int64)
    with pytest.raises(bert_tf.BertError, match="1 or 2 segments"):
        text_graph.pack_inputs([seg, seg, seg], 8, 1, 2)
    with pytest.raises(bert_tf.BertError, match="seq_length 2"):
        text_graph.pack_inputs([seg, seg], 2, 1, 2)


@pytest.fixture(scope="module")
def pair_fn(tokenizers):
    """tokenize + pack of a sentence pair at seq 16 as one tf.function (traced once)."""
    lower, py, tg = tokenizers

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)] * 2)
    def fn(x, y):
        return text_graph.pack_inputs([tg.tokenize(x), tg.tokenize(y)], 16, tg.cls_id, tg.sep_id)
    return fn


def test_tokenize_and_pack_in_tf_function_matches_python(tokenizers, pair_fn):
    lower, py, tg = tokenizers
    fn = pair_fn
    # Row 2: b == "" and row 3: b is not empty but tokenizes to nothing (space, BEL, ZWSP).
    # The original (`if tokens_b:`) packs both as a single segment, like an absent b.
    a = ["The old lighthouse at Port Ellery had stood on its granite shelf for 147 years.", "",
         "Zoë", "Zoë kept a logbook in which she wrote every evening, all 212 of them."]
    b = ["“Nothing happens here,” she told the visitors.", "Why?", "", " \x07\u200b "]

    out = {k: v.numpy().tolist() for k, v in fn(tf.constant(a), tf.constant(b)).items()}
    assert py.tokenize(b[3]) == []
    a3 = py.convert_tokens_to_ids(py.tokenize(a[3]))
    assert len(a3) > 14  # single-segment budget: 14 pieces of a, one [SEP], no type-1 tokens
    assert out["input_word_ids"][3] == [tg.cls_id] + a3[:14] + [tg.sep_id]
    assert out["input_type_ids"][3] == [0] * 16 and out["input_mask"][3] == [1] * 16
    for i in range(4):
        want = py_pack(py.convert_tokens_to_ids(py.tokenize(a[i])),
                       py.convert_tokens_to_ids(py.tokenize(b[i])), 16, tg.cls_id, tg.sep_id)
        assert (out["input_word_ids"][i], out["input_mask"][i], out["input_type_ids"][i]) == want
    # Batch of one and an all-empty batch.
    one = fn(tf.constant(["Zoë"]), tf.constant([""]))["input_word_ids"].numpy().tolist()
    assert one == [py_pack(py.convert_tokens_to_ids(py.tokenize("Zoë")), [], 16,
                           tg.cls_id, tg.sep_id)[0]]
    empty = fn(tf.constant(["", ""]), tf.constant(["", ""]))["input_word_ids"].numpy().tolist()
    assert empty == [[tg.cls_id, tg.sep_id] + [0] * 14] * 2


# ---------------------------------------------------------------------------------------------
# Keras layer

def test_preprocessing_layer_single_and_pair(tokenizers):
    lower, py, tg = tokenizers
    layer = text_graph.BertPreprocessingLayer(py.vocab_file, do_lower_case=lower, seq_length=12)
    texts = ["Zoë kept a logbook.", "", "A journalist from Tōkyō wrote an article titled 灯台守の夜."]
    out = layer(tf.constant(texts))
    assert sorted(out) == ["input_mask", "input_type_ids", "input_word_ids"]
    for i, t in enumerate(texts):
        want = py_pack(py.convert_tokens_to_ids(py.tokenize(t)), None, 12, tg.cls_id, tg.sep_id)
        assert out["input_word_ids"][i].numpy().tolist() == want[0]
        assert out["input_mask"][i].numpy().tolist() == want[1]
    pair = layer([tf.constant(texts), tf.constant(["Why?", "Yes.", "No."])])
    want = py_pack(py.convert_tokens_to_ids(py.tokenize(texts[0])),
                   py.convert_tokens_to_ids(py.tokenize("Why?")), 12, tg.cls_id, tg.sep_id)
    assert pair["input_type_ids"][0].numpy().tolist() == want[2]
    assert pair["input_word_ids"][0].numpy().tolist() == want[0]


def test_preprocessing_layer_config_and_functional_model(tokenizers):
    lower, py, tg = tokenizers
    layer = text_graph.BertPreprocessingLayer(py.vocab_file, do_lower_case=lower)
    config = layer.get_config()
    assert (config["vocabulary"], config["do_lower_case"], config["seq_length"]) == (
        tokenization.vocab_tokens(py.vocab_file), lower, 128)
    clone = text_graph.BertPreprocessingLayer.from_config(config)
    inp = keras.Input(shape=(), dtype="string")
    model = keras.Model(inp, clone(inp))
    texts = tf.constant(["Zoë kept a logbook.", "", "x"])
    got = model(texts)
    want = layer(texts)
    for k in want:
        assert got[k].shape == (3, 128)
        np.testing.assert_array_equal(got[k].numpy(), want[k].numpy())


def test_preprocessing_layer_keras_file_is_self_contained(tokenizers, tmp_path):
    lower, py, tg = tokenizers
    vocab = tmp_path / "vocab.txt"
    vocab.write_text(open(py.vocab_file, encoding="utf-8").read(), encoding="utf-8")
    inp = keras.Input(shape=(), dtype="string")
    model = keras.Model(inp, text_graph.BertPreprocessingLayer(str(vocab), lower, 16)(inp))
    texts = tf.constant(["Zoë kept a logbook.", "", "灯台守の夜"])
    want = model(texts)
    model.save(str(tmp_path / "pre.keras"))
    vocab.unlink()  # the .keras file must not need it
    again = keras.models.load_model(str(tmp_path / "pre.keras"))
    got = again(texts)
    for k in want:
        np.testing.assert_array_equal(got[k].numpy(), want[k].numpy())


# ---------------------------------------------------------------------------------------------
# TF Serving op safety

def test_tokenize_and_pack_use_only_serving_safe_ops(tokenizers, pair_fn):
    lower, py, tg = tokenizers
    ops = serving_ops.ops_in_concrete_function(pair_fn.get_concrete_function())
    serving_ops.check_serving_safe(ops)
    # Fast path (TF Serving >= 2.12) and the exact path's composed steps.
    assert {"FastWordpieceTokenizeWithOffsets", "StaticRegexFullMatch",
            "RegexSplitWithOffsets", "StaticRegexReplace"} <= ops
    # Cased, FastBertNormalize would only do what fast rows do not need.
    assert ("NormalizeUTF8" in ops) == lower and ("FastBertNormalize" in ops) == lower
    assert not any(op.startswith("TFText>") for op in ops)
    assert not ops & {"PyFunc", "EagerPyFunc", "PyFuncStateless"}


def test_fast_bert_allowed_newer_tf_text_ops_flagged():
    tok = tf_text.FastBertTokenizer(vocab=["[UNK]", "a", "##b"], lower_case_nfd_strip_accents=True)
    trimmer = tf_text.RoundRobinTrimmer(max_seq_length=4)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def fn(x):
        ids = tok.tokenize(x)
        return trimmer.trim([ids, ids])

    ops = serving_ops.ops_in_concrete_function(fn.get_concrete_function())
    assert {"FastBertNormalize", "FastWordpieceTokenizeWithOffsets"} <= ops
    assert serving_ops.unsafe_ops(ops) == ["TFText>RoundRobinTrim"]
    with pytest.raises(bert_tf.BertError) as e:
        serving_ops.check_serving_safe(ops, what="trim")
    msg = str(e.value)
    assert msg.startswith("trim: ") and "TFText>RoundRobinTrim" in msg and ">= 2.12" in msg
    assert "FastBertNormalize" not in msg and "\n" not in msg


def test_py_function_and_unknown_ops_are_flagged():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def fn(x):
        return tf.py_function(lambda v: v * 2, [x], tf.float32)

    assert serving_ops.unsafe_ops(serving_ops.ops_in_concrete_function(fn)) == ["EagerPyFunc"]
    assert serving_ops.unsafe_ops(["MatMul", "MyCustomOp", "TFText>RoundRobinTrim"]) == [
        "MyCustomOp", "TFText>RoundRobinTrim"]
    assert "NormalizeUTF8" not in serving_ops.core_ops() and "MatMul" in serving_ops.core_ops()


def test_saved_model_ops_assets_and_round_trip(tokenizers, tmp_path):
    lower, py, tg = tokenizers
    module = tf.Module()
    module.tokenizer = tg
    module.serve = tf.function(
        lambda x: text_graph.pack_inputs([tg.tokenize(x)], 16, tg.cls_id, tg.sep_id),
        input_signature=[tf.TensorSpec([None], tf.string)])
    export_dir = str(tmp_path / "export")
    tf.saved_model.save(module, export_dir)
    assert os.listdir(os.path.join(export_dir, "assets")) == ["vocab.txt"]
    ops = serving_ops.ops_in_saved_model(export_dir)
    serving_ops.check_serving_safe(ops, what=export_dir)
    assert {"RegexSplitWithOffsets", "FastWordpieceTokenizeWithOffsets",
            "InitializeTableFromTextFileV2"} <= ops
    # Loading reads the vocab from assets/, not from the original path.
    os.rename(py.vocab_file, py.vocab_file + ".moved")
    try:
        loaded = tf.saved_model.load(export_dir)
        text = "Zoë climbed the stairs with an oil lantern."
        got = loaded.serve(tf.constant([text]))["input_word_ids"].numpy().tolist()
    finally:
        os.rename(py.vocab_file + ".moved", py.vocab_file)
    assert got == [py_pack(py.convert_tokens_to_ids(py.tokenize(text)), None, 16,
                           tg.cls_id, tg.sep_id)[0]]
    with pytest.raises(bert_tf.BertError, match="no saved_model.pb"):
        serving_ops.ops_in_saved_model(str(tmp_path))
