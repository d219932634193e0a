"""The format protocol: a `Format` (what one format module defines) and the `Source` its
`read` returns. The table of formats, in detection order, is `bert_tf.convert.formats`.

A format module defines `FORMAT = Format(name, detect, read, write=None, ...)`:

  detect(path)  -> the path its reader takes (a checkpoint prefix, a directory) or None;
                   never raises (`Format` turns a file-system error into None, and
                   `formats.detect` explains a path no format takes)
  read(path)    -> Source: config, vocab, casing (and sentence-transformers settings) from
                   the source; weights are loaded only by `Source.load(model)`, and read once
  write(...)    -> (net, config, out, vocab_file, casing), where the format can be written:
                   `out` is a new directory (bert-convert renames it into place)

No other module names a format or branches on one: they ask the Source or the Format. This
module imports no format; a format imports no other format to exclude it (where detection
order decides, the table in `formats` says why).
"""
import dataclasses
import functools
import os
import posixpath
import re

import tensorflow as tf

from bert_tf import BertError


@dataclasses.dataclass(frozen=True)
class Format:
    """One format bert_tf reads and/or writes.

    Attributes:
        name: what `--from`/`--to` and `Source.format` call it.
        detect: path -> the path `read` takes, or None when the path is not this format.
        read: detected path -> `Source` (None: write-only).
        write: (net, config, out, vocab_file, casing) -> None, or None when not writable.
        looks_for: what detection looks for (the "no checkpoint found" message lists them).
        heads: the format can hold the MLM + NSP pre-training heads.
        needs_vocab: writing needs a vocab file.
        aliases: other `--from`/`--to` names that mean this format.
        also_reads: names of formats `--from=<name>` accepts too (read as what they are).
        config: path of a JSON config file -> BertConfig when the file is in this format's
            dialect, else None (`--bert_config_file`; the default is bert_config.json's).
        explain: path no format takes -> a one-line refusal when the path holds this format's
            kind of model in a form bert_tf does not read (e.g. a pickle), else None.
    """
    name: str
    detect: object
    read: object = None
    write: object = None
    looks_for: str = ""
    heads: bool = False
    needs_vocab: bool = False
    aliases: tuple = ()
    also_reads: tuple = ()
    config: object = None
    explain: object = None

    def __post_init__(self):
        object.__setattr__(self, "detect", _never_raises(self.detect))
        if self.explain is not None:
            object.__setattr__(self, "explain", _never_raises(self.explain))


# What a path no format takes (a garbage name, an unreadable or foreign file) raises in detect.
_NOT_THIS_FORMAT = (BertError, OSError, ValueError, UnicodeError, tf.errors.OpError)


def _never_raises(detect):
    """`detect` returning None where the path cannot be inspected (the protocol's promise)."""
    if getattr(detect, "never_raises", False):
        return detect

    @functools.wraps(detect)
    def safe(path):
        try:
            return detect(path)
        except _NOT_THIS_FORMAT:
            return None
    safe.never_raises = True
    return safe


@dataclasses.dataclass
class Source:
    """What a format's `read` found at a path.

    Attributes:
        format: the Format's name.
        path: what the loader reads (checkpoint prefix, directory, file).
        directory: where the config / vocab files that come with it are.
        bert_config: its BertConfig, or None when the source has none (then
            `config_hint` says what is missing).
        vocab_file: its vocab file, or None.
        casing: (do_lower_case, strip_accents) the source records, or None.
        loader: model -> load report (the weights go into `model`); see `load`.
        has_mlm: () -> whether the source holds the masked-LM head.
        pooling: (read_pooling) -> (pooling, normalize) of a sentence-transformers model.
        max_seq_length: a sentence-transformers model's max_seq_length, or None.
        model: the whole Keras model, where reading built one (a .keras file).
        config_file: the file the config came from, where it came from one.
        do_lower_case, strip_accents, casing_from: filled by `formats.read` (see
            `bert_tf.pretrained.read_pretrained`).
    """
    format: str
    path: str
    directory: str
    bert_config: object = None
    vocab_file: str = None
    casing: tuple = None
    loader: object = None
    has_mlm: object = lambda: False
    pooling: object = lambda read_pooling=True: (None, False)
    max_seq_length: int = None
    model: object = None
    config_file: str = None
    config_hint: str = "no bert_config.json beside the checkpoint"
    do_lower_case: bool = True
    strip_accents: bool = True
    casing_from: str = None

    @property
    def detected(self):
        """The source itself (it has format, path and directory), as `read_pretrained`'s
        callers used it."""
        return self

    def load(self, model):
        """Loads the source's weights into `model` (a BertEncoder, task model or a Keras
        model with one encoder); returns the report dict (`bert_tf.convert.common`)."""
        return self.loader(model)


def join(*parts):
    """os.path.join, posixpath for URLs (gs://)."""
    return posixpath.join(*parts) if "://" in parts[0] else os.path.join(*parts)


def safe_relative(directory, name, what):
    """directory/name for a file name a SavedModel or its metadata records; BertError when the
    name is absolute or climbs out (`..`), so reading never leaves `directory`.

    Args:
        directory: the folder the name is relative to.
        name: the recorded name.
        what: what the name is, for the error message.
    """
    parts = name.replace("\\", "/").split("/")
    if not name or name.startswith(("/", "\\")) or ":" in parts[0] or ".." in parts:
        raise BertError(f"{directory}: {what} {name!r} is not a file name inside the folder "
                        f"(absolute or with '..'); refusing to read outside it")
    return join(directory, *[p for p in parts if p not in ("", ".")])


def real_inside(directory, path, what):
    """`path`, after checking that a local one does not resolve (through symlinks) outside
    `directory`; BertError (one line) when it does. URLs (gs://) have no links: returned as is.

    Args:
        directory: the folder the file must stay in.
        path: the file, already joined under `directory`.
        what: what the file is, for the error message.
    """
    if "://" in path:
        return path
    real, home = os.path.realpath(path), os.path.realpath(directory)
    if os.path.commonpath([real, home]) != home:
        raise BertError(f"{directory}: {what} {os.path.basename(path)!r} is a link to {real}, "
                        f"outside the folder; refusing to read outside it")
    return path


def file_in(directory, name):
    """directory/name if it exists, else None.

    Args:
        directory: the directory (local path or URL).
        name: the file's name in it.
    """
    path = join(directory, name)
    return path if tf.io.gfile.exists(path) else None


def parent(path):
    """The directory of `path` ("." for a bare name); posix-style, so URLs work too."""
    return posixpath.dirname(path) or "."


def _variables(prefix):
    return dict(tf.train.list_variables(prefix))


def checkpoint_variables(path):
    """(prefix, {variable name: shape}) of the checkpoint at `path` (prefix, `.index` file or
    a directory: its latest), or (None, {}) when there is none or it cannot be read
    (`formats.detect` names why)."""
    from bert_tf.convert import common
    path = os.fspath(path)
    if path.endswith((".keras", ".safetensors")):
        return None, {}
    try:
        prefix = common.resolve_prefix(path)
        common.reader(prefix)
        return prefix, _variables(prefix)
    except _NOT_THIS_FORMAT:
        return None, {}


def lazy(fn):
    """fn() computed once, on the first call."""
    return functools.lru_cache(maxsize=1)(fn)


def saved_model_inside(path):
    """The SavedModel directory `path` stands for, or None: `path` itself, else its
    `encoder/` (an encoder + preprocessor pair), else its newest numbered version folder
    (the TF Serving layout, `<model>/<version>/`), each holding a saved_model.pb."""
    if not tf.io.gfile.isdir(path):
        return None
    if file_in(path, "saved_model.pb"):
        return path
    if file_in(path, join("encoder", "saved_model.pb")):
        return join(path, "encoder")
    versions = [v.rstrip("/") for v in tf.io.gfile.listdir(path)]
    for v in sorted((v for v in versions if re.fullmatch("[0-9]+", v)), key=int, reverse=True):
        if file_in(path, join(v, "saved_model.pb")):
            return join(path, v)
    return None


def beside(directory):
    """{bert_config, config_file, vocab_file} (Source fields) of the `bert_config.json` and
    `vocab.txt` next to a checkpoint, as the original release ships them (None: absent)."""
    from bert_tf.modeling.config import BertConfig
    cfg = file_in(directory, "bert_config.json")
    return dict(bert_config=BertConfig.from_json_file(cfg) if cfg else None, config_file=cfg,
                vocab_file=file_in(directory, "vocab.txt"))


def note(message):
    """Prints a one-line note on stderr (something the user should know; not an error)."""
    import sys
    print(f"note: {message}", file=sys.stderr)


def write_config_and_vocab(out, cfg, vocab_file, casing, name):
    """bert_config.json and vocab.txt into `out`, as the original release ships them; a
    note when the casing is one no --do_lower_case expresses.

    Args:
        out: the output directory.
        cfg: the BertConfig to write.
        vocab_file: the vocab file to copy, or None to write none.
        casing: (do_lower_case, strip_accents) of the tokenizer.
        name: the format written (named in the note).
    """
    cfg.to_json_file(posixpath.join(out, "bert_config.json"))
    if vocab_file is not None:
        tf.io.gfile.copy(vocab_file, posixpath.join(out, "vocab.txt"))
    lower, strip = casing
    if lower != strip:
        note(f"--to={name} records no casing, and this tokenizer's (lower-case "
             f"{lower}, strip accents {strip}) is no --do_lower_case: tokenize with "
             f"FullTokenizer(vocab, do_lower_case={lower}, strip_accents={strip})")
