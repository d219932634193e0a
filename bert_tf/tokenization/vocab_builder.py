"""Learn a WordPiece vocab from text files (one sentence per line), fitted to our tokenizer.

Words come from `tokenization.BasicTokenizer` (the very pre-tokenization FullTokenizer applies),
so every learned piece is reachable. The vocab is: reserved tokens ([PAD] = 0 first), every
character seen, its `##` continuation, then pieces learned by greedy pair merging (the most
frequent adjacent pair of pieces, weighted by word counts, ties broken by the pair's text),
until the budget is spent or no pair occurs `min_frequency` times. Deterministic.

    python -m bert_tf.tokenization.vocab_builder --input a.txt,b*.txt --output vocab.txt --vocab_size 4000
        [--nodo_lower_case] [--min_frequency 2]    (--input/--output: aliases of
        --input_file/--output_file)
"""
import collections
import heapq
import sys

import bert_tf  # noqa: F401
from bert_tf import BertError, fileio
from bert_tf.tokenization import wordpiece as tokenization

RESERVED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_PREFIX = "##"


def expand_input_files(input_files):
    """Comma-separated globs (or a list of them) -> files (see `fileio.expand_globs`), each
    file once: a file two globs match must not be counted twice."""
    return list(dict.fromkeys(fileio.expand_globs(input_files)))


def count_words(files, do_lower_case=True):
    """Counter of BasicTokenizer words over all lines of the files.

    Lines are first cut at separators (C-speed), then each distinct chunk is tokenized once:
    the same words as tokenizing every line, much faster on real text.

    Args:
        files: list of text files (local or gs://...); bad UTF-8 bytes are dropped.
        do_lower_case: as BasicTokenizer's; must match the model the vocab is for.
    """
    chunks = collections.Counter()
    separators = tokenization.word_separators()
    for path in files:
        with fileio.open_file(path, "rb") as f:
            for line in f:
                chunks.update(separators.split(line.decode("utf-8", "ignore")))
    basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    counts = collections.Counter()
    for chunk, n in chunks.items():
        for word in basic.tokenize(chunk):
            counts[word] += n
    return counts


def _merged(a, b):
    return a + b[len(_PREFIX):]


class _PairMerger:
    """Incremental most-frequent-pair merging over weighted words (lazy max-heap)."""

    def __init__(self, word_counts):
        self.words = []  # [symbols, count]
        self.pair_counts = collections.Counter()
        self.pair_words = collections.defaultdict(set)
        for word, count in word_counts.items():
            symbols = [word[0]] + [_PREFIX + c for c in word[1:]]
            idx = len(self.words)
            self.words.append((symbols, count))
            for pair in zip(symbols, symbols[1:]):
                self.pair_counts[pair] += count
                self.pair_words[pair].add(idx)
        self.heap = [(-n, pair) for pair, n in self.pair_counts.items()]
        heapq.heapify(self.heap)

    def best(self, min_frequency):
        while self.heap:
            neg, pair = self.heap[0]
            current = self.pair_counts.get(pair, 0)
            if -neg != current:  # stale entry
                heapq.heappop(self.heap)
                if current > 0:
                    heapq.heappush(self.heap, (-current, pair))
                continue
            return pair if current >= min_frequency else None
        return None

    def merge(self, pair):
        a, b = pair
        new = _merged(a, b)
        touched = set()
        for idx in sorted(self.pair_words.pop(pair, ())):
            symbols, count = self.words[idx]
            for p in zip(symbols, symbols[1:]):
                self.pair_counts[p] -= count
                touched.add(p)
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            self.words[idx] = (out, count)
            for p in zip(out, out[1:]):
                self.pair_counts[p] += count
                self.pair_words[p].add(idx)
                touched.add(p)
        for p in touched:
            n = self.pair_counts[p]
            if n <= 0:
                del self.pair_counts[p]
            else:
                heapq.heappush(self.heap, (-n, p))
        return new


def learn_vocab_from_counts(word_counts, vocab_size, reserved_tokens=RESERVED_TOKENS,
                            min_frequency=2):
    """The vocab (list, index = id) for a Counter of words.

    Args:
        word_counts: Counter of BasicTokenizer words (`count_words`).
        vocab_size: int, most tokens in the vocab, reserved ones included.
        reserved_tokens: tokens that take the first ids, in order (duplicates dropped).
        min_frequency: stop merging once the best pair occurs fewer times than this.

    Raises:
        BertError: vocab_size is smaller than the reserved tokens.
    """
    reserved = list(dict.fromkeys(reserved_tokens))
    if vocab_size < len(reserved):
        raise BertError(f"--vocab_size: {vocab_size} is smaller than the {len(reserved)} "
                        "reserved tokens")
    tokens = list(reserved)
    seen = set(tokens)

    def add(token):
        if token not in seen and len(tokens) < vocab_size:
            seen.add(token)
            tokens.append(token)

    first_chars, inner_chars = collections.Counter(), collections.Counter()
    for word, count in word_counts.items():
        for i, c in enumerate(word):
            (inner_chars if i else first_chars)[c] += count
    all_chars = first_chars + inner_chars
    by_freq = sorted(all_chars, key=lambda c: (-all_chars[c], c))
    for c in by_freq:
        add(c)
    # Continuations for every character too, not only those seen inside words: unseen
    # combinations then still tokenize without [UNK]. Punctuation and CJK ideographs are always
    # words of their own, so their ## forms could never be used.
    for c in by_freq:
        if not tokenization._is_punctuation(c) and not tokenization._is_cjk(ord(c)):
            add(_PREFIX + c)
    merger = _PairMerger({w: n for w, n in word_counts.items()
                          if len(w) <= tokenization.MAX_INPUT_CHARS_PER_WORD})
    while len(tokens) < vocab_size:
        pair = merger.best(min_frequency)
        if pair is None:
            break
        add(merger.merge(pair))
    return tokens


def write_vocab(tokens, output_file):
    """One token a line, written to a temp name and renamed into place.

    Args:
        tokens: the vocab, index = id.
        output_file: vocab.txt to write (parent folders are created).
    """
    fileio.write_text_atomic(output_file, "".join(t + "\n" for t in tokens), make_parent=True)


def learn_vocab(input_files, output_file, vocab_size=8000, do_lower_case=True,
                reserved_tokens=RESERVED_TOKENS, min_frequency=2):
    """Learns a WordPiece vocab from text files and writes it to output_file; returns it.

    Args:
        input_files: comma-separated globs or a list of them (see `expand_input_files`).
        output_file: vocab.txt to write.
        vocab_size: int, most tokens, reserved ones included.
        do_lower_case: lower-case and strip accents (for an uncased model).
        reserved_tokens: tokens that take the first ids.
        min_frequency: stop merging pairs seen fewer times than this.

    Returns:
        The token list, index = id.
    """
    files = expand_input_files(input_files)
    counts = count_words(files, do_lower_case=do_lower_case)
    if not counts:
        raise BertError(f"--input_file: no text in {', '.join(files)}")
    tokens = learn_vocab_from_counts(counts, vocab_size, reserved_tokens, min_frequency)
    write_vocab(tokens, output_file)
    return tokens


def _flag_values():
    """The CLI's flags in their own FlagValues, so main() can be called in-process (tests)."""
    from absl import flags
    fv = flags.FlagValues()
    flags.DEFINE_string("input_file", None, "Comma-separated globs of text files, one sentence "
                        "a line.", flag_values=fv)
    flags.DEFINE_string("output_file", None, "Where to write vocab.txt.", flag_values=fv)
    flags.DEFINE_integer("vocab_size", 8000, "Maximum number of tokens, reserved ones included.",
                         flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased model).",
                      flag_values=fv)
    flags.DEFINE_integer("min_frequency", 2, "Stop merging pairs seen fewer times than this.",
                         flag_values=fv)
    flags.DEFINE_alias("input", "input_file", flag_values=fv)
    flags.DEFINE_alias("output", "output_file", flag_values=fv)
    return fv


def main(argv=None):
    """CLI entry: exits with `error: ...` (no traceback) on bad flags or input."""
    from absl import flags
    fv = _flag_values()
    argv = sys.argv if argv is None else argv
    if any(a in ("-h", "--help", "-help", "--helpfull", "--helpshort") for a in argv[1:]):
        print(__doc__.strip() + "\n\nflags:\n" + fv.get_help())
        return 0
    try:
        fv(argv)
    except flags.Error as e:
        sys.exit(f"error: {e}")
    for name in ("input_file", "output_file"):
        if not fv[name].value:
            sys.exit(f"error: --{name}: required")
    try:
        tokens = learn_vocab(fv.input_file, fv.output_file, vocab_size=fv.vocab_size,
                             do_lower_case=fv.do_lower_case, min_frequency=fv.min_frequency)
    except BertError as e:
        sys.exit(f"error: {e}")
    print(f"wrote {len(tokens)} tokens to {fv.output_file}")
    return 0


if __name__ == "__main__":
    main()
