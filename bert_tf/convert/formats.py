"""The table of formats, in detection order, and the one way to read a source.

Every entry point reads through here: `bert_tf.from_pretrained`, every script's
`--init_checkpoint` (`bert_tf.convert.handoff`) and `--bert_config_file` (`read_config`),
`bert-convert --from/--to`, `bert-export-savedmodel`, `bert-extract-features` and
`load_checkpoint`. Each format is one module defining `FORMAT` (`bert_tf.convert.source`);
adding one is a new module and one line in FORMATS. No other module names a format.
"""
import os

from bert_tf import BertError
from bert_tf.convert import (bert_tf_export, common, hf, keras_file, keras_hub,
                             model_garden_format, native, source, tf1, tfhub)

# Detection order: the first format whose detect() takes the path reads it.
FORMATS = (
    keras_file.FORMAT,
    bert_tf_export.FORMAT,  # before tfhub: our export is a TF Hub-style SavedModel too
    tfhub.FORMAT,
    keras_hub.FORMAT,
    hf.FORMAT,
    tf1.FORMAT,
    native.FORMAT,  # before model_garden: our object checkpoints may use its `encoder` key
    model_garden_format.FORMAT,
)


def names(readable=True):
    """The --from (readable) or --to (writable) names, aliases included."""
    return [n for f in FORMATS if (f.read if readable else f.write)
            for n in (f.name, *f.aliases)]


def by_name(name):
    """The Format called `name` (or one of its aliases); BertError for none."""
    for f in FORMATS:
        if name == f.name or name in f.aliases:
            return f
    raise BertError(f"unknown format {name!r}; expected one of {', '.join(names())}")


def _no_format(path):
    """The one-line error for a path no format takes."""
    looked_for = "; ".join(f.looks_for for f in FORMATS if f.looks_for)
    for f in FORMATS:
        refusal = f.explain(path) if f.explain else None
        if refusal:
            return BertError(refusal)
    try:
        prefix = common.resolve_prefix(path)
    except BertError as e:
        raise BertError(f"{e} (looked for {looked_for})") from None
    common.reader(prefix)
    names_ = dict(source.checkpoint_variables(prefix)[1])
    if "_CHECKPOINTABLE_OBJECT_GRAPH" not in names_:
        return BertError(f"{prefix}: a checkpoint without BERT variables (no bert/... names "
                         f"and no object graph)")
    return BertError(f"{prefix}: a tf.train.Checkpoint with no BERT encoder under bert_tf's "
                     f"object keys (model, model/encoder) or Model Garden's (encoder, "
                     f"model/encoder_network)")


def detect(path):
    """(Format, the path its reader takes) of `path`; BertError naming what was looked for."""
    path = os.fspath(path)
    for f in FORMATS:
        found = f.detect(path)
        if found is not None:
            return f, found
    raise _no_format(path)


def read(path, bert_config_file=None, vocab_file=None, do_lower_case=None, expect=None,
         flags=False):
    """Reads `path` through the table: a `source.Source` with config, vocab and casing.
    Nothing is kept between calls: a command passes the Source it read to its own load.

    Args:
        path: any path a format detects (checkpoint prefix or directory, HF / keras-hub /
            SavedModel directory, `.safetensors` or `.keras` file; str or PathLike).
        bert_config_file: a config file (any dialect `read_config` reads) over the source's.
        vocab_file: a vocab over the source's.
        do_lower_case: casing over the source's.
        expect: a format name the source must be (bert-convert --from), or None.
        flags: errors name the command's flags (--bert_config_file), not the arguments.
    """
    return finish(read_source(path, expect), bert_config_file, vocab_file, do_lower_case,
                  flags)


def read_source(path, expect=None):
    """What the detected format's read gives: config, vocab and casing as the source has them
    (`bert_config` None when it has no config: `config_hint` says what is missing).

    Args:
        path: any path a format detects (str or PathLike).
        expect: a format name the source must be (bert-convert --from), or None.
    """
    path = os.fspath(path)
    fmt, found = detect(path)
    if expect is not None:
        want = by_name(expect)
        if fmt is not want and fmt.name not in want.also_reads:
            raise BertError(f"{path}: holds a {fmt.name} model, not --from={expect}")
    return fmt.read(found)


def finish(src, bert_config_file=None, vocab_file=None, do_lower_case=None, flags=False):
    """A copy of `src` with the overrides applied, the vocab checked against the config
    and the casing settled: recorded in the source, else the original release's naming
    (`uncased_...`), else the original's default (lower-case).

    Args:
        src: the `source.Source` a format's read gave.
        bert_config_file: a config file (any dialect `read_config` reads) over the source's.
        vocab_file: a vocab over the source's.
        do_lower_case: casing over the source's, or None.
        flags: errors name the command's flags (--bert_config_file), not the arguments.
    """
    import dataclasses
    from bert_tf.tokenization import check_vocab_size
    cfg = src.bert_config
    if bert_config_file is not None:
        cfg = read_config(os.fspath(bert_config_file))
    if cfg is None:
        cfg_arg, vocab_arg = (("--bert_config_file", "--vocab_file") if flags else
                              ("bert_config_file=...", "vocab_file=..."))
        raise BertError(f"{src.path}: {src.config_hint}: pass {cfg_arg} (and {vocab_arg} "
                        f"for text input)")
    vocab = os.fspath(vocab_file) if vocab_file is not None else src.vocab_file
    if vocab is not None:  # before any weights are read
        check_vocab_size(vocab, cfg.vocab_size, bert_config_file or src.path)
    casing, casing_from = src.casing, None if src.casing is None else "source"
    if do_lower_case is not None:
        casing, casing_from = (bool(do_lower_case), bool(do_lower_case)), "argument"
    if casing is None:
        lower = common.casing_from_name(src.path)
        casing_from = None if lower is None else "name"
        casing = (True, True) if lower is None else (lower, lower)
    return dataclasses.replace(src, bert_config=cfg, vocab_file=vocab, do_lower_case=casing[0],
                               strip_accents=casing[1], casing_from=casing_from)


def read_config(path):
    """The BertConfig of a `--bert_config_file`: a JSON file in the dialect of the format
    that claims it (a Hugging Face config.json is read as HF's), else bert_config.json's;
    or a checkpoint / model directory any format reads (its config)."""
    import tensorflow as tf
    from bert_tf.modeling.config import BertConfig
    path = os.fspath(path)
    if tf.io.gfile.isdir(path) or not path.endswith(".json"):
        if tf.io.gfile.exists(path) or tf.io.gfile.exists(path + ".index"):
            return read(path).bert_config
    for f in FORMATS:
        cfg = f.config(path) if f.config and tf.io.gfile.exists(path) else None
        if cfg is not None:
            return cfg
    return BertConfig.from_json_file(path)


def _as_source(path_or_source):
    if isinstance(path_or_source, source.Source):
        return path_or_source
    return read_source(path_or_source)


def load_checkpoint(model, path):
    """Loads any BERT checkpoint the table reads into `model`; returns the report dict.

    Args:
        model: a BertEncoder, task model or Keras model with one encoder.
        path: any path a format detects (str or PathLike), or the `source.Source` a
            command already read (its weights are read now, not again).
    """
    return _as_source(path).load(model)


def pooling_of(path):
    """(pooling, normalize) a source (a path or a `source.Source`) declares for embeddings
    (sentence-transformers), else (None, False); a source no format reads declares none."""
    try:
        src = _as_source(path)
    except BertError:
        return None, False
    return src.pooling(True)
