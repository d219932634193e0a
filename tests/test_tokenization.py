"""FullTokenizer: the original release's rules, exact tokens and ids.

Expected values are derived by hand from the rules, not printed from our output.
"""
import os

import pytest

import bert_tf
from bert_tf import tokenization
from bert_tf.tokenization import BasicTokenizer, FullTokenizer, WordpieceTokenizer

# The original release's test vocab, ids 0..10.
REF_VOCAB = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing", ","]


def write_vocab(path, tokens, newline="\n"):
    path.write_bytes("".join(t + newline for t in tokens).encode("utf-8"))
    return str(path)


@pytest.fixture
def ref_vocab_file(tmp_path):
    return write_vocab(tmp_path / "vocab.txt", REF_VOCAB)


@pytest.fixture
def ref_tokenizer(ref_vocab_file):
    # The reference vocab has no [MASK]; only [UNK] is needed to tokenize.
    return FullTokenizer(ref_vocab_file, do_lower_case=True, required=(tokenization.UNK,))


# ---------------------------------------------------------------------------------------------
# The original release's tokenization_test.py vectors

def test_reference_full_tokenizer(ref_tokenizer):
    tokens = ref_tokenizer.tokenize("UNwant\u00E9d,running")
    assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert ref_tokenizer.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
    assert ref_tokenizer.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
    assert ref_tokenizer.convert_tokens_to_ids(ref_tokenizer.tokenize("unwantedX running")) == [
        0, 8, 9]


def test_reference_full_tokenizer_with_mask_appended(tmp_path):
    # Same vocab plus [MASK] on line 11: the default required tokens load, ids 0..10 unchanged.
    path = write_vocab(tmp_path / "v.txt", REF_VOCAB + ["[MASK]"])
    tok = FullTokenizer(path)
    assert tok.convert_tokens_to_ids(tok.tokenize("UNwant\u00E9d,running")) == [7, 4, 5, 10, 8, 9]
    assert tok.vocab["[MASK]"] == 11


def test_reference_chinese():
    assert BasicTokenizer().tokenize("ah\u535A\u63A8zz") == ["ah", "\u535A", "\u63A8", "zz"]


def test_reference_basic_lower():
    assert BasicTokenizer(do_lower_case=True).tokenize(" \tHeLLo!how  \n Are yoU?  ") == [
        "hello", "!", "how", "are", "you", "?"]
    assert BasicTokenizer(do_lower_case=True).tokenize("H\u00E9llo") == ["hello"]


def test_reference_basic_cased():
    assert BasicTokenizer(do_lower_case=False).tokenize(" \tHeLLo!how  \n Are yoU?  ") == [
        "HeLLo", "!", "how", "Are", "yoU", "?"]
    # Accent stripping is tied to lower-casing: cased keeps the precomposed é.
    assert BasicTokenizer(do_lower_case=False).tokenize("H\u00E9llo") == ["H\u00E9llo"]


def test_reference_wordpiece():
    vocab = {t: i for i, t in enumerate(REF_VOCAB)}
    wp = WordpieceTokenizer(vocab)
    assert wp.tokenize("") == []
    assert wp.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
    assert wp.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]


def test_reference_empty(ref_tokenizer):
    assert ref_tokenizer.tokenize("") == []
    assert BasicTokenizer().tokenize("") == []
    assert BasicTokenizer().tokenize(" \t\n ") == []


# ---------------------------------------------------------------------------------------------
# Cleaning, whitespace, CJK

@pytest.mark.parametrize("lower", [True, False])
def test_control_chars_deleted_joining_neighbours(lower):
    b = BasicTokenizer(do_lower_case=lower)
    # NUL, U+FFFD, BEL (Cc), ZERO WIDTH SPACE (Cf), SOFT HYPHEN (Cf), private use (Co).
    assert b.tokenize("ab\x00cd\ufffdef\x07gh\u200bij\u00adkl\ue000mn") == ["abcdefghijklmn"]
    # \x0b \x0c \x1c-\x1f U+0085 are str.split() separators, but the original deletes them first
    # as control characters, so they join words instead of splitting them.
    assert b.tokenize("a\x0bb\x0cc\x1cd\x1fe\x85f") == ["abcdef"]
    # Unassigned code points (category Cn) are control characters too.
    assert b.tokenize("x\U000E0080y") == ["xy"]


@pytest.mark.parametrize("lower", [True, False])
def test_whitespace_variants_split(lower):
    b = BasicTokenizer(do_lower_case=lower)
    # tab, newline, CR, NBSP (Zs), ideographic space (Zs), thin space (Zs).
    assert b.tokenize("a\tb\nc\rd\u00a0e\u3000f\u2009g") == list("abcdefg")
    # U+2028 / U+2029 survive cleaning (category Zl/Zp is not C*) and str.split() splits on them.
    assert b.tokenize("one\u2028two\u2029three") == ["one", "two", "three"]


@pytest.mark.parametrize("lower", [True, False])
def test_cjk_spacing(lower):
    b = BasicTokenizer(do_lower_case=lower)
    assert b.tokenize("我爱中文abc") == ["我", "爱", "中", "文", "abc"]
    # Extension B ideograph and a CJK compatibility ideograph are spaced too; lower-casing's NFD
    # maps the compatibility ideograph U+F900 to its canonical equivalent U+8C48.
    assert b.tokenize("x\U00020000y\uF900z") == [
        "x", "\U00020000", "y", "\u8C48" if lower else "\uF900", "z"]
    # Kana and Hangul are not CJK ideographs: they stay words; 、 (U+3001, Po) and 。 split.
    # Uncased: NFD splits が into か + U+3099 (dakuten, Mn), which is stripped (as in the
    # original uncased models), and Hangul syllables into conjoining jamo (Lo, kept).
    assert b.tokenize("ありがとう、ひかり。カナ") == [
        "ありかとう" if lower else "ありがとう", "、", "ひかり", "。", "カナ"]
    assert b.tokenize("한국") == (["\u1112\u1161\u11ab\u1100\u116e\u11a8"] if lower else ["한국"])
    # Mixed kanji + kana: only the ideographs are spaced out.
    assert b.tokenize("灯台守の夜") == ["灯", "台", "守", "の", "夜"]


@pytest.mark.parametrize("lower", [True, False])
def test_emoji(lower):
    b = BasicTokenizer(do_lower_case=lower)
    # Emoji are So, not punctuation: they stay inside words.
    assert b.tokenize("hi🙂there 🎄🌊🏠") == ["hi🙂there", "🎄🌊🏠"]
    # Skin-tone modifier (Sk) kept; ZERO WIDTH JOINER (Cf) deleted; VS16 (Mn) is stripped
    # only when lower-casing.
    assert b.tokenize("👍🏽 👨\u200d👩") == ["👍🏽", "👨👩"]
    assert b.tokenize("❤\ufe0f") == (["❤"] if lower else ["❤\ufe0f"])


# ---------------------------------------------------------------------------------------------
# Punctuation

@pytest.mark.parametrize("lower", [True, False])
def test_ascii_punctuation_includes_symbols(lower):
    b = BasicTokenizer(do_lower_case=lower)
    # $ + < = > ^ ` | ~ are symbols (S*) in Unicode but punctuation to the original (ASCII ranges).
    assert b.tokenize("a$b+c<d=e>f^g`h|i~j") == [
        "a", "$", "b", "+", "c", "<", "d", "=", "e", ">", "f", "^", "g", "`", "h", "|", "i",
        "~", "j"]
    assert b.tokenize("(0)1234 567-890") == ["(", "0", ")", "1234", "567", "-", "890"]
    assert b.tokenize("3.14") == ["3", ".", "14"]


@pytest.mark.parametrize("lower", [True, False])
def test_unicode_punctuation(lower):
    b = BasicTokenizer(do_lower_case=lower)
    # em dash (Pd), en dash (Pd), curly quotes (Pi/Pf), guillemets (Pi/Pf), ellipsis (Po).
    assert b.tokenize("x\u2014y\u2013z") == ["x", "\u2014", "y", "\u2013", "z"]
    assert b.tokenize("\u201cok\u201d \u2018no\u2019") == ["\u201c", "ok", "\u201d", "\u2018", "no", "\u2019"]
    assert b.tokenize("«oui»…") == ["«", "oui", "»", "…"]
    # Fullwidth comma and the inverted question mark are P* too.
    assert b.tokenize("a，b¿c") == ["a", "，", "b", "¿", "c"]
    # Non-ASCII symbols are not punctuation: € (Sc), × (Sm), © (So) stay in words.
    assert b.tokenize("€1×2©") == ["€1×2©"]


# ---------------------------------------------------------------------------------------------
# Case and accents

def test_uncased_strips_accents_and_lowercases():
    b = BasicTokenizer(do_lower_case=True)
    assert b.tokenize("Zoë Bézier FAÇADE Kraków Tōkyō naïve") == [
        "zoe", "bezier", "facade", "krakow", "tokyo", "naive"]
    # Already-decomposed input: the combining acute (Mn) is dropped.
    assert b.tokenize("Be\u0301zier") == ["bezier"]
    # Not compatibility-normalised (NFD, not NFKD): ligature, sharp s, ½ stay.
    assert b.tokenize("ﬁne Straße ½") == ["ﬁne", "straße", "½"]
    # İ lower-cases to i + combining dot above, which is then stripped.
    assert b.tokenize("İstanbul") == ["istanbul"]
    # Greek: final sigma at the end of a word; tonos stripped.
    assert b.tokenize("ΟΔΟΣ ΣΑΣ. Άλφα") == [
        "\u03bf\u03b4\u03bf\u03c2", "\u03c3\u03b1\u03c2", ".", "\u03b1\u03bb\u03c6\u03b1"]


def test_cased_keeps_case_and_accents():
    b = BasicTokenizer(do_lower_case=False)
    assert b.tokenize("Zoë Bézier FAÇADE Be\u0301zier") == [
        "Zoë", "Bézier", "FAÇADE", "Be\u0301zier"]


# ---------------------------------------------------------------------------------------------
# WordPiece

def test_long_word_unk_at_201_chars(tmp_path):
    path = write_vocab(tmp_path / "v.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##a"])
    tok = FullTokenizer(path)
    assert tok.tokenize("a" * 200) == ["a"] + ["##a"] * 199
    assert tok.tokenize("a" * 201) == ["[UNK]"]
    assert tok.tokenize("a" * 201 + " a") == ["[UNK]", "a"]


def test_long_word_limit_counts_characters_not_bytes(tmp_path):
    path = write_vocab(tmp_path / "v.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "é", "##é"])
    tok = FullTokenizer(path, do_lower_case=False)
    assert tok.tokenize("é" * 200) == ["é"] + ["##é"] * 199  # 400 bytes, 200 chars
    assert tok.tokenize("é" * 201) == ["[UNK]"]


def test_unmatched_piece_gives_single_unk(ref_tokenizer):
    # "wantx": want + "##x" missing -> the whole word is one [UNK], not "want [UNK]".
    assert ref_tokenizer.tokenize("wantx unwanted") == ["[UNK]", "un", "##want", "##ed"]
    assert ref_tokenizer.tokenize("xyz") == ["[UNK]"]


def test_greedy_longest_match_first(ref_tokenizer):
    # "wa" and "want" both match the start of "wanted": the longest wins, then ##ed.
    assert ref_tokenizer.tokenize("wanted") == ["want", "##ed"]
    assert ref_tokenizer.tokenize("wa") == ["wa"]


def test_convert_round_trip(ref_tokenizer):
    tokens = ref_tokenizer.tokenize("unwanted, running")
    ids = ref_tokenizer.convert_tokens_to_ids(tokens)
    assert ids == [7, 4, 5, 10, 8, 9]
    assert ref_tokenizer.convert_ids_to_tokens(ids) == tokens
    assert ref_tokenizer.convert_ids_to_tokens(range(11)) == REF_VOCAB
    assert len(ref_tokenizer) == 11


def test_convert_errors(ref_tokenizer, ref_vocab_file):
    with pytest.raises(bert_tf.BertError, match="not in the vocab") as e:
        ref_tokenizer.convert_tokens_to_ids(["nope"])
    assert ref_vocab_file in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(bert_tf.BertError, match="outside the vocab"):
        ref_tokenizer.convert_ids_to_tokens([11])


# ---------------------------------------------------------------------------------------------
# Vocab files

def test_vocab_with_unicode_line_separators(tmp_path):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a\u2028b", "x\u0085y", "p\u2029q",
              "r\u000bs", "z"]
    path = write_vocab(tmp_path / "v.txt", tokens)
    vocab = tokenization.load_vocab(path)
    # ids = line numbers: U+2028/U+2029/U+0085/\x0b are not line breaks in a vocab file.
    assert vocab == {t: i for i, t in enumerate(tokens)}
    assert tokenization.vocab_tokens(path) == tokens
    tok = FullTokenizer(path)
    assert tok.convert_tokens_to_ids(["z", "a\u2028b"]) == [9, 5]
    assert tok.convert_ids_to_tokens([6, 7]) == ["x\u0085y", "p\u2029q"]


def test_vocab_crlf_and_trailing_spaces(tmp_path):
    path = write_vocab(tmp_path / "v.txt", ["[PAD]", "[UNK] ", "[CLS]", "[SEP]", "[MASK]", "hi"],
                       newline="\r\n")
    vocab = tokenization.load_vocab(path)
    assert vocab["[UNK]"] == 1 and vocab["hi"] == 5 and len(vocab) == 6


def test_vocab_duplicates_later_wins(tmp_path):
    path = write_vocab(tmp_path / "v.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "x", "x"])
    assert tokenization.load_vocab(path)["x"] == 6


def test_missing_vocab_file(tmp_path):
    missing = str(tmp_path / "nope" / "vocab.txt")
    with pytest.raises(bert_tf.BertError) as e:
        FullTokenizer(missing)
    msg = str(e.value)
    assert missing in msg and "not found" in msg and "\n" not in msg


@pytest.mark.parametrize("token", ["[CLS]", "[SEP]", "[MASK]", "[UNK]"])
def test_missing_required_token(tmp_path, token):
    tokens = [t for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"] if t != token]
    path = write_vocab(tmp_path / "v.txt", tokens)
    with pytest.raises(bert_tf.BertError) as e:
        FullTokenizer(path)
    msg = str(e.value)
    assert msg.startswith(path + ":") and token in msg and "\n" not in msg


def test_empty_and_invalid_vocab(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(bert_tf.BertError, match="empty"):
        tokenization.load_vocab(str(empty))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"[PAD]\n[UNK]\n\xff\xfe\n")
    with pytest.raises(bert_tf.BertError, match="line 3 is not valid UTF-8"):
        tokenization.load_vocab(str(bad))


# ---------------------------------------------------------------------------------------------
# Inputs

def test_bytes_input_decoded_ignoring_invalid_utf8(ref_tokenizer):
    assert ref_tokenizer.tokenize("unwanted".encode()) == ["un", "##want", "##ed"]
    assert BasicTokenizer().tokenize(b"ab\xffcd \xe4\xb8") == ["abcd"]
    with pytest.raises(bert_tf.BertError, match="str or bytes"):
        BasicTokenizer().tokenize(3)


def test_sample_text_lines():
    # Spot checks on the shared fixture text (tests/data/sample_text.txt).
    b = BasicTokenizer(do_lower_case=True)
    assert b.tokenize("Its keeper, a quiet woman named Zoë Harrington, kept a logbook.") == [
        "its", "keeper", ",", "a", "quiet", "woman", "named", "zoe", "harrington", ",", "kept",
        "a", "logbook", "."]
    assert b.tokenize("\tTower height\t31.4 m\t(focal plane 38 m above sea level)") == [
        "tower", "height", "31", ".", "4", "m", "(", "focal", "plane", "38", "m", "above",
        "sea", "level", ")"]
    assert BasicTokenizer(do_lower_case=False).tokenize("The budget was €1,250,000 — or") == [
        "The", "budget", "was", "€1", ",", "250", ",", "000", "—", "or"]


@pytest.mark.parametrize("lower", [True, False])
def test_id_tokenizer_equals_full_tokenizer_on_text_files(lower):
    """The cached fast path gives FullTokenizer's ids for every line, cold and warm, and after
    its cache starts over."""
    data = os.path.join(os.path.dirname(__file__), "data")
    vocab_path = os.path.join(data, "pretraining", "vocab.txt")
    full = FullTokenizer(vocab_path, do_lower_case=lower)
    fast = tokenization.IdTokenizer(dict(full.vocab), do_lower_case=lower, cache_size=50)
    lines = []
    for name in ("sample_text.txt", os.path.join("pretraining", "corpus.txt")):
        with open(os.path.join(data, name), encoding="utf-8") as f:
            lines += f.read().splitlines()
    assert len(lines) > 50
    for _ in range(2):
        for line in lines:
            assert fast.encode(line) == full.convert_tokens_to_ids(full.tokenize(line)), line
