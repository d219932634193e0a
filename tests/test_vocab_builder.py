"""vocab_builder: a WordPiece vocab learned from the shipped sample corpus, exact and atomic."""
import collections
import os
import re
import subprocess
import sys

import pytest

import bert_tf
from bert_tf import tokenization
from bert_tf.tokenization import vocab_builder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tfrecords", "sample_corpus.txt")
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # the original vocab.txt's order


def corpus_text():
    with open(CORPUS, encoding="utf-8") as f:
        return f.read()


def simple_words(text, lower):
    """The corpus is plain ASCII: BasicTokenizer's words are runs of letters/digits and single
    punctuation characters (an independent re-statement, not the library's code)."""
    assert text.isascii()
    if lower:
        text = text.lower()
    return re.findall(r"[A-Za-z0-9]+|[^\sA-Za-z0-9]", text)


def reference_vocab(words, vocab_size, min_frequency=2):
    """Naive statement of the documented algorithm (recount every pair at every step)."""
    counts = collections.Counter(words)
    tokens = list(SPECIALS)
    chars = collections.Counter(c for w in words for c in w)
    by_freq = sorted(chars, key=lambda c: (-chars[c], c))
    tokens += by_freq
    tokens += ["##" + c for c in by_freq if c.isalnum()]  # ASCII: non-alnum = punctuation
    del tokens[vocab_size:]
    split = {w: [w[0]] + ["##" + c for c in w[1:]] for w in counts}
    while len(tokens) < vocab_size:
        pairs = collections.Counter()
        for w, n in counts.items():
            for p in zip(split[w], split[w][1:]):
                pairs[p] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < min_frequency:
            break
        merged = best[0] + best[1][2:]
        for w, sym in split.items():
            out, i = [], 0
            while i < len(sym):
                if i + 1 < len(sym) and (sym[i], sym[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(sym[i])
                    i += 1
            split[w] = out
        if merged not in tokens:
            tokens.append(merged)
    return tokens


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """{(vocab_size, lower): (tokens, path)} learned once for the module."""
    d = tmp_path_factory.mktemp("vocab")
    out = {}
    for size, lower in ((400, True), (400, False), (50, True)):
        path = str(d / f"vocab-{size}-{lower}.txt")
        out[size, lower] = vocab_builder.learn_vocab(CORPUS, path, vocab_size=size,
                                                     do_lower_case=lower), path
    return out


def test_special_tokens_first_in_original_order(learned):
    tokens, path = learned[400, True]
    assert tokens[:5] == SPECIALS
    vocab = tokenization.load_vocab(path)
    assert [vocab[t] for t in SPECIALS] == [0, 1, 2, 3, 4]


def test_file_is_the_returned_list(learned):
    tokens, path = learned[400, True]
    with open(path, "rb") as f:
        assert f.read() == "".join(t + "\n" for t in tokens).encode("utf-8")
    assert len(tokens) == 400 == len(set(tokens))
    assert tokenization.vocab_tokens(path) == tokens


@pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])
def test_matches_naive_reference_algorithm(learned, lower):
    tokens, _ = learned[400, lower]
    assert tokens == reference_vocab(simple_words(corpus_text(), lower), 400)


def test_character_section_by_frequency(learned):
    tokens, _ = learned[400, True]
    text = corpus_text().lower()
    freq = collections.Counter(c for c in text if not c.isspace())
    chars = sorted(freq, key=lambda c: (-freq[c], c))
    assert tokens[5:5 + len(chars)] == chars
    assert tokens[5:10] == ["e", "t", "a", "s", "o"]
    # Then the ## continuations of every non-punctuation character, same order.
    cont = ["##" + c for c in chars if c.isalnum()]
    assert tokens[5 + len(chars):5 + len(chars) + len(cont)] == cont
    # Cased: capitals are kept as their own characters.
    cased, _ = learned[400, False]
    assert "T" in cased and "##T" in cased and "T" not in tokens


@pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])
def test_every_corpus_word_tokenizes_without_unk(learned, lower):
    tokens, path = learned[400, lower]
    tok = tokenization.FullTokenizer(path, do_lower_case=lower)
    pieces = tok.tokenize(corpus_text())
    assert "[UNK]" not in pieces
    # Learned merges are used: far fewer pieces than characters, and frequent words are whole.
    assert len(pieces) < 0.5 * sum(len(w) for w in simple_words(corpus_text(), lower))
    # Regression pin (the vocab itself is checked against the naive reference above).
    if lower:
        assert tok.tokenize("The lighthouse keeper wrote in the logbook every evening.") == [
            "the", "li", "##gh", "##th", "##ou", "##se", "keep", "##er", "w", "##ro", "##t",
            "##e", "in", "the", "lo", "##g", "##b", "##oo", "##k", "every", "e", "##ven", "##ing",
            "."]


def test_small_vocab_is_cut_to_size(learned):
    tokens, path = learned[50, True]
    assert len(tokens) == 50 and tokens[:5] == SPECIALS
    assert tokens == reference_vocab(simple_words(corpus_text(), True), 50)
    # 5 specials + 29 characters leave room for 16 "##" forms only ("##e" ... "##m"): words
    # with a rarer letter after their first character become [UNK], the others do not.
    assert tokens[-1] == "##m" and "##f" not in tokens and "f" in tokens
    tok = tokenization.FullTokenizer(path)
    assert tok.tokenize("feet mud fox") == ["f", "##e", "##e", "##t", "m", "##u", "##d", "[UNK]"]


def test_deterministic_bytes(learned, tmp_path):
    _, path = learned[400, True]
    again = str(tmp_path / "again.txt")
    vocab_builder.learn_vocab(CORPUS, again, vocab_size=400)
    with open(path, "rb") as a, open(again, "rb") as b:
        assert a.read() == b.read()


def test_written_atomically(tmp_path, monkeypatch):
    out = tmp_path / "sub" / "vocab.txt"
    seen = {}
    real_replace = os.replace

    def replace(src, dst):
        # At rename time the final name does not exist yet and the temp file is complete.
        seen["final_existed"] = os.path.exists(dst)
        with open(src, encoding="utf-8") as f:
            seen["lines"] = f.read().count("\n")
        seen["src"] = src
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    vocab_builder.learn_vocab(CORPUS, str(out), vocab_size=100)
    assert seen["final_existed"] is False and seen["lines"] == 100
    assert seen["src"] == f"{out}.tmp-{os.getpid()}"
    assert os.listdir(out.parent) == ["vocab.txt"]  # no temp file left


def test_failure_leaves_existing_output_untouched(tmp_path):
    out = tmp_path / "vocab.txt"
    out.write_bytes(b"old\n")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"\n \n\t\n\x00\x07\n")  # blank lines and control characters only
    with pytest.raises(bert_tf.BertError) as e:
        vocab_builder.learn_vocab(str(empty), str(out), vocab_size=100)
    msg = str(e.value)
    assert msg == f"--input_file: no text in {empty}"
    assert out.read_bytes() == b"old\n"
    assert sorted(os.listdir(tmp_path)) == ["empty.txt", "vocab.txt"]


def test_errors(tmp_path):
    missing = str(tmp_path / "nope*.txt")
    with pytest.raises(bert_tf.BertError) as e:
        vocab_builder.learn_vocab(missing, str(tmp_path / "v.txt"))
    assert str(e.value) == f"--input_file: {missing!r} matches no files"
    with pytest.raises(bert_tf.BertError, match=r"^--vocab_size: 3 is smaller than the 5 reserved"):
        vocab_builder.learn_vocab(CORPUS, str(tmp_path / "v.txt"), vocab_size=3)
    assert not os.path.exists(tmp_path / "v.txt")


def test_cli_in_process(tmp_path, capsys):
    out = str(tmp_path / "vocab.txt")
    assert vocab_builder.main(["prog", "--input", CORPUS, "--output", out,
                               "--vocab_size", "120", "--nodo_lower_case"]) == 0
    assert capsys.readouterr().out == f"wrote 120 tokens to {out}\n"
    assert tokenization.vocab_tokens(out) == reference_vocab(
        simple_words(corpus_text(), False), 120)
    # The original flag names work too.
    out2 = str(tmp_path / "vocab2.txt")
    vocab_builder.main(["prog", f"--input_file={CORPUS}", f"--output_file={out2}",
                        "--vocab_size=120", "--nodo_lower_case"])
    assert open(out2, "rb").read() == open(out, "rb").read()
    capsys.readouterr()
    assert vocab_builder.main(["prog", "--help"]) == 0
    usage = capsys.readouterr().out
    assert "--input: Alias for --input_file." in usage and "--vocab_size" in usage


@pytest.mark.parametrize("args,message", [
    (["--output", "OUT"], "error: --input_file: required"),
    (["--input", "MISSING", "--output", "OUT"], "error: --input_file: 'MISSING' matches no files"),
    (["--input", "EMPTY", "--output", "OUT"], "error: --input_file: no text in EMPTY"),
    (["--input", "CORPUS", "--output", "OUT", "--vocab_size=abc"], "error: flag --vocab_size=abc"),
])
def test_cli_errors_one_line_and_nonzero(tmp_path, args, message):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    subst = {"OUT": str(tmp_path / "v.txt"), "MISSING": str(tmp_path / "missing.txt"),
             "EMPTY": str(empty), "CORPUS": CORPUS}
    args = [subst.get(a, a) for a in args]
    message = message.replace("MISSING", subst["MISSING"]).replace("EMPTY", subst["EMPTY"])
    with pytest.raises(SystemExit) as e:
        vocab_builder.main(["prog"] + args)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    assert not os.path.exists(subst["OUT"])


def test_module_entry_point(tmp_path, learned):
    """`python -m bert_tf.tokenization.vocab_builder` in a fresh process (another hash seed): same bytes."""
    out = str(tmp_path / "vocab.txt")
    # A local corpus is read and the vocab written without importing TensorFlow (~9 s saved).
    no_tf = tmp_path / "no_tf" / "tensorflow"
    no_tf.mkdir(parents=True)
    (no_tf / "__init__.py").write_text("raise ImportError('the vocab builder imported TF')\n")
    env = dict(os.environ, PYTHONHASHSEED="987",
               PYTHONPATH=os.pathsep.join([str(no_tf.parent), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "bert_tf.tokenization.vocab_builder", "--input", CORPUS,
                           "--output", out, "--vocab_size", "400"],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"wrote 400 tokens to {out}"
    with open(out, "rb") as a, open(learned[400, True][1], "rb") as b:
        assert a.read() == b.read()
    bad = subprocess.run([sys.executable, "-m", "bert_tf.tokenization.vocab_builder", "--input",
                          str(tmp_path / "none.txt"), "--output", out + "2"],
                         capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines()[-1] == (
        f"error: --input_file: {str(tmp_path / 'none.txt')!r} matches no files")
