"""FullTokenizer: the original release's BasicTokenizer + WordpieceTokenizer, exactly.

Behaviour (the original release's tokenization.py): clean text (drop NUL, U+FFFD, control
chars; whitespace -> space), space out CJK ideographs, split on whitespace, optionally
lower-case + NFD + drop combining marks, split off punctuation, then greedy
longest-match-first WordPiece with `##` continuations, 200 chars per word at most, and
`[UNK]` for a word with any unmatched piece.
"""
import collections
import functools
import re
import unicodedata

from bert_tf import BertError, fileio

UNK, CLS, SEP, MASK, PAD = "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[PAD]"
REQUIRED_TOKENS = (UNK, CLS, SEP, MASK)
MAX_INPUT_CHARS_PER_WORD = 200

# CJK Unified Ideographs blocks the original spaces out (not Hangul/Kana: those are words).
_CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)


def convert_to_unicode(text):
    """`text` as str: bytes are decoded as UTF-8, dropping invalid bytes as the original does."""
    if isinstance(text, str):
        return text
    if isinstance(text, bytes):
        return text.decode("utf-8", "ignore")
    raise BertError(f"tokenizer input must be str or bytes, got {type(text).__name__}")


def _read_lines(vocab_file):
    text = fileio.read_text(vocab_file, "vocab file not found")
    # Split on "\n" only: str.splitlines() would also split tokens containing U+2028, U+0085...
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def load_vocab(vocab_file, required=REQUIRED_TOKENS):
    """Token -> id (id = line number). Later duplicates win, as in the original.

    Args:
        vocab_file: vocab.txt, one token per line (local or gs://...).
        required: tokens that must be present (BertError otherwise); () checks none.

    Returns:
        An OrderedDict of token -> id.
    """
    vocab = collections.OrderedDict()
    for index, line in enumerate(_read_lines(vocab_file)):
        # Strip only ASCII whitespace: U+2028/U+0085 can be (part of) a real token.
        vocab[line.strip(" \t\r\n")] = index
    if not vocab:
        raise BertError(f"{vocab_file}: vocab file is empty")
    missing = [t for t in required if t not in vocab]
    if missing:
        raise BertError(f"{vocab_file}: vocab is missing required token(s) {' '.join(missing)}")
    return vocab


def vocab_tokens(vocab_file):
    """The vocab as a list, index = id (what the in-graph lookup table is built from)."""
    return [line.strip(" \t\r\n") for line in _read_lines(vocab_file)]


def whitespace_tokenize(text):
    """Words of `text` split on any Unicode whitespace, as the original's helper."""
    # Python's str.split(): splits on every Unicode whitespace, U+2028 included (original does too).
    return text.split()


@functools.lru_cache(maxsize=None)
def word_separators():
    """Compiled regex of what the tokenizer splits words on once cleaning has run: \\t \\n \\r,
    Zs, and U+2028/U+2029 (str.split()). Other str.split() separators (\\x1c-\\x1f, \\x0b, \\x0c,
    U+0085) are control characters that cleaning deletes, joining their neighbours, so they do
    not split. Splitting text at these first yields the same words (the vocab builder's
    C-speed pre-split)."""
    return re.compile("[" + "".join(
        re.escape(chr(cp)) for cp in range(0x110000)
        if not 0xD800 <= cp <= 0xDFFF
        and (_is_whitespace(chr(cp)) or unicodedata.category(chr(cp)) in ("Zl", "Zp"))) + "]+")


def _is_whitespace(char):
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char):
    if char in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(char).startswith("C")


def _is_punctuation(char):
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(cp):
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


class BasicTokenizer:
    """Cleaning, CJK spacing, optional lower-casing + accent stripping, punctuation split.

    Args:
        do_lower_case: lower-case each word (str.lower).
        strip_accents: drop combining marks after NFD; None (the original) = do_lower_case.
            False with do_lower_case is keras-hub's default uncased tokenizer (and HF's
            `strip_accents=False`): lower-cased, accents kept.
    """

    def __init__(self, do_lower_case=True, strip_accents=None):
        self.do_lower_case = do_lower_case
        self.strip_accents = bool(do_lower_case if strip_accents is None else strip_accents)

    def tokenize(self, text):
        """Words and punctuation of `text` (str or UTF-8 bytes), before WordPiece."""
        text = self._clean_text(convert_to_unicode(text))
        text = self._space_cjk(text)
        split_tokens = []
        for token in whitespace_tokenize(text):
            if self.do_lower_case:
                token = token.lower()
            if self.strip_accents:
                token = self._strip_accents(token)
            split_tokens.extend(self._split_on_punc(token))
        return whitespace_tokenize(" ".join(split_tokens))

    @staticmethod
    def _clean_text(text):
        out = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xFFFD or _is_control(char):
                continue
            out.append(" " if _is_whitespace(char) else char)
        return "".join(out)

    @staticmethod
    def _space_cjk(text):
        out = []
        for char in text:
            if _is_cjk(ord(char)):
                out.extend((" ", char, " "))
            else:
                out.append(char)
        return "".join(out)

    @staticmethod
    def _strip_accents(text):
        return "".join(c for c in unicodedata.normalize("NFD", text)
                       if unicodedata.category(c) != "Mn")

    @staticmethod
    def _split_on_punc(text):
        pieces, current = [], []
        for char in text:
            if _is_punctuation(char):
                if current:
                    pieces.append("".join(current))
                    current = []
                pieces.append(char)
            else:
                current.append(char)
        if current:
            pieces.append("".join(current))
        return pieces


class WordpieceTokenizer:
    """Greedy longest-match-first WordPiece over whitespace-separated words.

    Args:
        vocab: token -> id (`load_vocab`); only membership is used.
        unk_token: the piece for a word that cannot be matched.
        max_input_chars_per_word: longer words become `unk_token` outright.
    """

    def __init__(self, vocab, unk_token=UNK, max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word
        self._cache = {}
        self._suffixes = self._longest = None  # built on first use

    def tokenize(self, text):
        """WordPiece tokens of already basic-tokenized `text`; words are cached (bounded)."""
        output = []
        for word in whitespace_tokenize(convert_to_unicode(text)):
            pieces = self._cache.get(word)
            if pieces is None:
                pieces = self.word_pieces(word)
                if len(self._cache) < 1_000_000:  # bounded: corpora have long tails
                    self._cache[word] = pieces
            output.extend(pieces)
        return output

    def word_pieces(self, word):
        """Pieces of one whitespace-free word (uncached).

        Candidates longer than the vocab's longest token are never tried, and continuation
        pieces are looked up without their "##" (one string fewer per try).
        """
        n = len(word)
        if n > self.max_input_chars_per_word:
            return [self.unk_token]
        vocab = self.vocab
        if n and word in vocab:
            return [word]
        if self._suffixes is None:
            self._suffixes = {t[2:] for t in vocab if t.startswith("##")}
            self._longest = (max(map(len, vocab), default=1), max(map(len, self._suffixes), default=0))
        suffixes, (longest, longest_suffix) = self._suffixes, self._longest
        pieces, start = [], 0
        while start < n:
            table = suffixes if start else vocab
            end = min(n, start + (longest_suffix if start else longest))
            while start < end and word[start:end] not in table:
                end -= 1
            if start == end:
                return [self.unk_token]
            pieces.append("##" + word[start:end] if start else word[start:end])
            start = end
        return pieces


class FullTokenizer:
    """End-to-end tokenization: BasicTokenizer then WordpieceTokenizer.

    Args:
        vocab_file: vocab.txt (local or gs://...).
        do_lower_case: lower-case and strip accents (uncased checkpoints).
        required: tokens the vocab must hold (see `load_vocab`).
        strip_accents: None (the original: strip exactly when lower-casing), or a bool that
            overrides it (`BasicTokenizer`), e.g. False for keras-hub's uncased presets.
    """

    def __init__(self, vocab_file, do_lower_case=True, required=REQUIRED_TOKENS,
                 strip_accents=None):
        self.vocab_file = vocab_file
        self.do_lower_case = do_lower_case
        self.vocab = load_vocab(vocab_file, required=required)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case,
                                              strip_accents=strip_accents)
        self.strip_accents = self.basic_tokenizer.strip_accents
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

    def tokenize(self, text):
        """WordPiece tokens (str) of `text`, str or UTF-8 bytes."""
        return [piece for token in self.basic_tokenizer.tokenize(text)
                for piece in self.wordpiece_tokenizer.tokenize(token)]

    def convert_tokens_to_ids(self, tokens):
        """Ids of `tokens`; BertError for a token not in the vocab."""
        try:
            return [self.vocab[t] for t in tokens]
        except KeyError as e:
            raise BertError(f"{self.vocab_file}: token {e.args[0]!r} is not in the vocab") from None

    def convert_ids_to_tokens(self, ids):
        """Tokens of `ids` (ints or numpy ints); BertError for an id outside the vocab."""
        try:
            return [self.inv_vocab[int(i)] for i in ids]
        except KeyError as e:
            raise BertError(f"{self.vocab_file}: id {e.args[0]} is outside the vocab") from None

    def __len__(self):
        return len(self.inv_vocab)
