"""IdTokenizer: FullTokenizer's ids, fast (the pre-training data path): cached per word, and
whole batches of lines at once (`encode_lines`: one dict lookup per word and a numpy gather)."""
import itertools
import re

from bert_tf.tokenization.wordpiece import BasicTokenizer, WordpieceTokenizer

# Characters that Python's str.split() treats as whitespace but the original tokenizer deletes
# (so they join their neighbours): a sentence containing one takes the uncached path.
_SPLIT_MISMATCH = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
_ASCII_CONTROL = {c: None for c in list(range(32)) + [127]}
_ASCII_PUNCT_SPLIT = re.compile(r"[!-/:-@\[-`{-~]|[^!-/:-@\[-`{-~]+")
_ASCII_PUNCT = frozenset(c for c in map(chr, range(128)) if _ASCII_PUNCT_SPLIT.fullmatch(c)
                         and not c.isalnum() and c.isprintable() and c != " ")


class IdTokenizer:
    """FullTokenizer's output as ids, cached per whitespace-separated word (the fast path).

    FullTokenizer works word by word after whitespace splitting, so tokenize(text) equals the
    concatenation over text.split() of tokenize(word), except for _SPLIT_MISMATCH characters
    (such a line goes whole through the exact path, as one table entry). Ids are identical to
    `convert_tokens_to_ids(FullTokenizer.tokenize(text))`.

    Args:
        vocab: token -> id (`load_vocab`).
        do_lower_case: as FullTokenizer's.
        cache_size: words cached at most (the cache starts over when full: bounded memory).
    """

    def __init__(self, vocab, do_lower_case=True, cache_size=1 << 18):
        self.vocab = vocab
        self.basic = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece = WordpieceTokenizer(vocab=vocab)
        self.cache_size = cache_size
        self.piece_ids = {}  # punctuation-split ASCII piece -> ids: "word," and "Word" share "word"
        # Vocab tokens that are their own only piece (ASCII letters/digits, one punctuation
        # character): a new word whose lower-cased form is one costs one dict lookup.
        longest = self.wordpiece.max_input_chars_per_word
        self._single = {t: i for t, i in vocab.items()
                        if t.isascii() and (t.isalnum() or t in _ASCII_PUNCT) and len(t) <= longest}
        self._reset_table()  # encode_lines: word -> row of a piece table

    def _slow(self, text):
        vocab, wp = self.vocab, self.wordpiece
        return [vocab[p] for t in self.basic.tokenize(text) for p in wp.tokenize(t)]

    def _word(self, word):
        """Ids of one whitespace-free word; ASCII words skip the per-character Unicode checks."""
        if not word.isascii():
            return self._slow(word)
        # ASCII: cleaning only deletes control characters; no CJK; NFD/accent stripping is a
        # no-op; every ASCII punctuation/symbol is a split point.
        lower = self.basic.do_lower_case
        if word.isalnum():  # letters and digits only: nothing to delete or split
            return self._piece_ids(word.lower() if lower else word)
        if word[-1] in _ASCII_PUNCT and word[:-1].isalnum():  # "word," "word." (common)
            head = word[:-1]
            return self._piece_ids(head.lower() if lower else head) + self._piece_ids(word[-1])
        word = word.translate(_ASCII_CONTROL)
        out = []
        for piece in _ASCII_PUNCT_SPLIT.findall(word.lower() if lower else word):
            out += self._piece_ids(piece)  # non-empty, no whitespace
        return out

    def _piece_ids(self, piece):
        """Ids of a punctuation-free (or single punctuation) ASCII piece, cached."""
        ids = self.piece_ids.get(piece)
        if ids is None:
            vocab = self.vocab
            ids = self.piece_ids[piece] = [vocab[p] for p in self.wordpiece.word_pieces(piece)]
        return ids

    def encode_lines(self, lines):
        """Ids of many lines at once -> (int32 ids of all lines back to back, int64 [lines]
        tokens per line); the same ids as `encode` per line.

        Each distinct word gets a row of a piece table, so a batch costs one dict lookup per
        word plus a numpy gather (a line with _SPLIT_MISMATCH characters is one "word" whose
        key holds a space, so it never meets a real word).

        Args:
            lines: the lines (str).
        """
        import numpy as np
        # Every line's words, then the word "\x00" (no pieces: the original deletes NUL) that
        # marks the line's end; one split() for the whole batch when no line needs care.
        joined = " \x00 ".join(lines) + " \x00" if lines else ""
        if _SPLIT_MISMATCH.search(joined) or joined.count("\x00") != len(lines):
            words = []
            for line in lines:
                if _SPLIT_MISMATCH.search(line):
                    words.append("\x00 " + line)
                else:  # a lone NUL word has no pieces: drop it, "\x00" marks line ends
                    words += [w for w in line.split() if w != "\x00"]
                words.append("\x00")
        else:
            if self.basic.do_lower_case and joined.isascii():
                joined = joined.lower()  # ASCII: the same as FullTokenizer's per-word lower()
            words = joined.split()
        table = self._table
        index = np.fromiter(map(table.get, words, itertools.repeat(-1)), np.int64, len(words))
        missing = np.flatnonzero(index < 0)
        if len(missing):
            new = list(dict.fromkeys(map(words.__getitem__, missing.tolist())))
            if len(table) + len(new) > self.cache_size:  # bounded memory: start over
                self._reset_table()
                self.piece_ids.clear()
                table = self._table
                new = [w for w in dict.fromkeys(words) if w not in table]
                missing = np.arange(len(words))  # every row number changed
            new_pieces, new_lens = [], []
            single, lower = self._single.get, self.basic.do_lower_case
            for w in new:
                table[w] = len(table)
                # Exact for any word: lower() comes first in FullTokenizer too, and a word
                # whose lower() is ASCII letters/digits has nothing to clean, strip or split.
                one = single(w.lower() if lower else w)
                if one is not None:
                    new_pieces.append(one)
                    new_lens.append(1)
                    continue
                ids = self._slow(w[2:]) if w.startswith("\x00 ") else self._word(w)
                new_pieces += ids
                new_lens.append(len(ids))
            pieces, _, lens = self._arrays
            lens = np.concatenate([lens, np.array(new_lens, np.int64)])
            starts = np.zeros(len(lens), np.int64)
            np.cumsum(lens[:-1], out=starts[1:])
            self._arrays = np.concatenate([pieces, np.array(new_pieces, np.int32)]), starts, lens
            index[missing] = [table[words[i]] for i in missing.tolist()]
        pieces, starts, lens = self._arrays
        word_len = lens[index]
        ends = np.cumsum(word_len)
        total = int(ends[-1]) if len(ends) else 0
        # Position t of the output is piece (t - output start of its word) of that word.
        src = np.repeat(starts[index] - (ends - word_len), word_len) + np.arange(total)
        line_tokens = ends[index == 0]  # tokens up to each line's end marker (row 0)
        return pieces[src], np.diff(line_tokens, prepend=0)

    def _reset_table(self):
        import numpy as np
        # Row 0: "\x00", the end-of-line marker of encode_lines (no pieces). Rows: the word's
        # pieces are pieces[starts[row]:starts[row] + lens[row]].
        self._table = {"\x00": 0}
        self._arrays = np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(1, np.int64)

    def encode(self, text):
        """Ids of `text` (a list of ints): `encode_lines` for one line (the same word table)."""
        return self.encode_lines([text])[0].tolist()
