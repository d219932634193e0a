"""Reading the pre-training corpus: globs, gzip, UTF-8 lines, documents, byte ranges, tfds.

Input format (the original's): one sentence per line, a blank line (empty after `str.strip()`)
between documents. Files are UTF-8; an invalid byte sequence is an error naming the file and
line (`BertError`), never silently dropped. Files ending in `.gz` are decompressed.

Local paths are read and listed with Python's own calls (no TensorFlow import, so start-up and
workers stay light); other schemes (gs://, ...) go through `tf.io.gfile`.
"""
import gzip
import re

from bert_tf import BertError, fileio

is_local = fileio.is_local


def is_gzip(path):
    """True for a `.gz` file (read decompressed; cannot be cut into byte ranges)."""
    return path.endswith(".gz")


def expand_input_patterns(input_file):
    """Comma-separated globs -> files, each glob in `tf.io.gfile.glob` order (as the original);
    see `fileio.expand_globs`. Unlike the original, a glob matching nothing is an error."""
    return fileio.expand_globs(input_file)


def file_size(path):
    """Size in bytes (local without TensorFlow, else `tf.io.gfile`)."""
    import os
    if is_local(path):
        return os.path.getsize(path)
    import tensorflow as tf
    return tf.io.gfile.stat(path).length


def open_binary(path):
    """Raw (compressed, if .gz) binary file object."""
    if is_local(path):
        try:
            return open(path, "rb")
        except OSError as e:
            raise BertError(f"{path}: cannot open ({e.strerror})") from None
    import tensorflow as tf
    try:
        return tf.io.gfile.GFile(path, "rb")
    except tf.errors.OpError as e:
        raise BertError(f"{path}: cannot open ({e.message})") from None


def open_lines(path):
    """Binary file object yielding lines split on b"\\n" only (what the original's GFile did)."""
    raw = open_binary(path)
    return gzip.GzipFile(fileobj=raw, mode="rb") if is_gzip(path) else raw


def _decode(line, path, line_number_fn):
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BertError(f"{path}: line {line_number_fn()} is not valid UTF-8 "
                        f"(byte 0x{line[e.start]:02x} at column {e.start + 1})") from None


def read_lines(path):
    """Yield each line of a file `.strip()`ed, as `str` (the original's per-line handling)."""
    f = open_lines(path)
    try:
        lineno = 0
        while True:
            try:
                line = f.readline()
            except (OSError, EOFError) as e:  # corrupt gzip
                raise BertError(f"{path}: cannot read after line {lineno} ({e})") from None
            if not line:
                return
            lineno += 1
            yield _decode(line, path, lambda: lineno).strip()
    finally:
        f.close()


def iter_file_documents(path):
    """Documents (lists of sentence strings) of one file; the file's end ends a document."""
    doc = []
    for line in read_lines(path):
        if line:
            doc.append(line)
        elif doc:
            yield doc
            doc = []
    if doc:
        yield doc


def _line_number_at(path, offset):
    """1-based line number of the byte at `offset` (only computed for error messages)."""
    with open_binary(path) as f:
        count, done = 1, 0
        while done < offset:
            chunk = f.read(min(1 << 20, offset - done))
            if not chunk:
                break
            count += chunk.count(b"\n")
            done += len(chunk)
    return count


def iter_range_documents(path, lo, hi, offsets=False):
    """Documents of an uncompressed file that *start* in the byte range [lo, hi).

    A document starts at byte 0 or at the blank line in front of it, so every document belongs
    to exactly one range however the file is cut, and a range never needs the whole file.
    Args:
        path: an uncompressed text file.
        lo, hi: the byte range.
        offsets: yield each document's byte offset instead of the bytes consumed.

    Yields:
        (document, bytes_consumed_since_last_yield), or with `offsets` (document, byte offset
        of its first line): a key that does not depend on how the file was cut.
    """
    f = open_binary(path)
    try:
        pos = lo
        if lo > 0:
            f.seek(lo - 1)
            pos = lo - 1 + len(f.readline())  # now at the first line start >= lo
        owned = lo == 0  # inside a document this range owns
        doc, last_pos, doc_pos = [], lo, 0
        while True:
            line = f.readline()
            if not line:
                break
            line_pos, pos = pos, pos + len(line)
            text = _decode(line, path, lambda: _line_number_at(path, line_pos)).strip()
            if text:
                if owned:
                    if not doc:
                        doc_pos = line_pos
                    doc.append(text)
                continue
            # A blank line ends the current document and starts the next one.
            if doc:
                yield doc, doc_pos if offsets else line_pos - last_pos
                last_pos, doc = line_pos, []
            if line_pos >= hi:
                break
            owned = True
        if doc:
            yield doc, doc_pos if offsets else pos - last_pos
    finally:
        f.close()


# ---- tensorflow-datasets ------------------------------------------------------------------

# End of sentence: . ! or ? (optionally followed by a closing quote/bracket), then whitespace.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]\u201d\u2019]))\s+")


def split_sentences(text):
    """Plain text -> sentences: paragraphs at newlines, then a simple end-of-sentence regex."""
    sentences = []
    for paragraph in text.split("\n"):
        for sentence in _SENTENCE_END.split(paragraph):
            sentence = sentence.strip()
            if sentence:
                sentences.append(sentence)
    return sentences


def iter_tfds_documents(name, split="train", data_dir=None, text_key="text"):
    """Documents from a tensorflow-datasets text dataset (e.g. `wikipedia/20230601.en`).

    Args:
        name: the tfds dataset name (`--tfds_dataset`).
        split: the split (a string or a `tfds.even_splits` object).
        data_dir: tfds's data directory (None: its default).
        text_key: the feature holding the text; it is cut into sentences by `split_sentences`.
    """
    import tensorflow_datasets as tfds
    try:
        ds = tfds.load(name, split=split, data_dir=data_dir, shuffle_files=False)
    except Exception as e:  # tfds raises many types; one line for the user
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BertError(f"--tfds_dataset: cannot load {name!r} split {split!r}: {msg}") from None
    if text_key not in ds.element_spec:
        raise BertError(f"--tfds_dataset: {name!r} has no feature {text_key!r} "
                        f"(features: {', '.join(sorted(ds.element_spec))})")
    for index, example in enumerate(tfds.as_numpy(ds)):
        value = example[text_key]
        try:
            text = value.decode("utf-8") if isinstance(value, bytes) else str(value)
        except UnicodeDecodeError:
            raise BertError(f"--tfds_dataset: {name} {split} example {index} is not valid UTF-8") from None
        doc = split_sentences(text)
        if doc:
            yield doc
