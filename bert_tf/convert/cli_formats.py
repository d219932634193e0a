"""Per-format readers and writers of `python -m bert_tf.convert` (see its docstring).

A reader turns a source into a `Source`: the bert_tf model (a BertEncoder, or a BertPretrainer
with the MLM and NSP heads), its BertConfig, the vocab file and the tokenizer casing the source
carries (None where its format records none). A writer puts a model into a directory that does
not exist yet; `__main__.convert` has it write a temporary name and renames it into place.
Peers are needed only where the converter module says so (writing Model Garden checkpoints,
keras-hub presets both ways).
"""
import collections
import posixpath
import sys

from bert_tf import BertError

FROM = ("tf1", "bert_tf", "hf", "model_garden", "tfhub", "keras_hub")
TO = ("tf1", "hf", "model_garden", "keras_hub", "savedmodel")
# Formats that can hold the MLM + NSP heads (keras-hub presets and our encoder export cannot).
HEADS_FROM = ("tf1", "bert_tf", "hf", "model_garden", "tfhub")
HEADS_TO = ("tf1", "hf", "model_garden")
# Where the vocab can come from when --vocab_file is not given.
VOCAB_FROM = ("hf", "tfhub", "keras_hub")

Source = collections.namedtuple("Source", "net config vocab_file casing")
Source.__doc__ = """A read source: model, BertConfig, vocab file or None, casing or None.

casing: (lowercase, strip_accents) of the source's tokenizer, as FullTokenizer(vocab,
do_lower_case=lowercase, strip_accents=strip_accents) takes them; None: not recorded.
"""

NSP_FRESH = "cls/seq_relationship/output_bias"


def note(message):
    """Prints a one-line note on stderr (something the user should know; not an error)."""
    print(f"note: {message}", file=sys.stderr)


def default_model(from_format, to_format):
    """--model when not given: "auto" (the pretrainer when the source has the MLM head, else
    the encoder; decided by the reader) where both formats can hold heads, else the encoder.

    Args:
        from_format: one of FROM.
        to_format: one of TO.
    """
    return "auto" if from_format in HEADS_FROM and to_format in HEADS_TO else "encoder"


def check_model(from_format, to_format, model):
    """BertError when --model=pretrainer meets a format without pre-training heads.

    Args:
        from_format: one of FROM.
        to_format: one of TO.
        model: "pretrainer" or "encoder" (anything else is a BertError too).
    """
    if model not in ("pretrainer", "encoder", "auto"):
        raise BertError(f"--model: expected pretrainer or encoder, got {model!r}")
    if model == "pretrainer":
        if from_format not in HEADS_FROM:
            raise BertError(f"--model=pretrainer: --from={from_format} holds no pre-training "
                            "heads (encoder only); pass --model=encoder")
        if to_format not in HEADS_TO:
            raise BertError(f"--model=pretrainer: --to={to_format} holds the encoder only; "
                            "pass --model=encoder")


# ---- readers ---------------------------------------------------------------------------------

def _flag_config(bert_config_file):
    from bert_tf.modeling.config import BertConfig
    return BertConfig.from_json_file(bert_config_file) if bert_config_file else None


def _no_heads(source):
    return BertError(f"{source}: has no pre-training (MLM) head: pass --model=encoder to "
                     "convert the encoder only")


def _resolve(model, source, has_mlm):
    """"auto" -> "pretrainer" when the source has the MLM head, else "encoder" (noted)."""
    if model != "auto":
        return model
    if has_mlm:
        return "pretrainer"
    note(f"{source} has no pre-training heads: converting the encoder")
    return "encoder"


def _loaded(load, source, cfg, model, has_mlm=False):
    """A new model for cfg, filled by a `load(model, path)` loader that reports what it missed.

    `has_mlm`: whether the source holds the MLM head (decides --model=auto)."""
    from bert_tf.convert.interop import build_bert_model, get_weights
    model = _resolve(model, source, has_mlm)
    net = build_bert_model(cfg, with_pretraining_heads=model == "pretrainer")
    fresh = {k: v for k, v in get_weights(net).items() if k.startswith("cls/seq_relationship/")}
    report = load(net, source)
    missing = [n for n in report["missing"] if not n.startswith("cls/seq_relationship/")]
    if missing:
        raise BertError(f"{source}: has no {', '.join(missing[:3])}"
                        f"{' ...' if len(missing) > 3 else ''} (pass --model=encoder to "
                        f"convert the encoder only)")
    if report["missing"]:  # an MLM-only source (HF BertForMaskedLM): NSP head initialised
        note(f"{source} has no next-sentence head: the output's is freshly initialised")
        from bert_tf.convert.interop import set_weights
        set_weights(net, dict(get_weights(net), **fresh), source)
    return net


def _from_weights(source, cfg, weights, model):
    """A new model for cfg holding TF1-named weights (shapes checked by set_weights)."""
    from bert_tf.convert.interop import build_bert_model, get_weights, set_weights
    heads = _resolve(model, source, "cls/predictions/output_bias" in weights) == "pretrainer"
    if heads and "cls/predictions/output_bias" not in weights:
        raise _no_heads(source)
    net = build_bert_model(cfg, with_pretraining_heads=heads)
    if heads and NSP_FRESH not in weights:
        note(f"{source} has no next-sentence head: the output's is freshly initialised")
        weights = dict(weights, **{k: v for k, v in get_weights(net).items()
                                   if k.startswith("cls/seq_relationship/")})
    return set_weights(net, weights, source)


def _checkpoint_has(source, model, fragment):
    """For --model=auto: whether a checkpoint variable name contains `fragment`."""
    if model != "auto":
        return False
    import tensorflow as tf
    from bert_tf.convert import common
    return any(fragment in n for n, _ in tf.train.list_variables(common.resolve_prefix(source)))


def _read_tf1(source, model, bert_config_file):
    from bert_tf.convert import tf1
    cfg = _flag_config(bert_config_file)
    if cfg is None:
        raise BertError("--bert_config_file: required with --from=tf1")
    has_mlm = _checkpoint_has(source, model, "cls/predictions/output_bias")
    return Source(_loaded(tf1.load_tf1_checkpoint, source, cfg, model, has_mlm), cfg, None, None)


def _read_bert_tf(source, model, bert_config_file):
    from bert_tf.convert import native
    cfg = _flag_config(bert_config_file)
    if cfg is None:
        raise BertError("--bert_config_file: required with --from=bert_tf")
    has_mlm = _checkpoint_has(source, model, "/masked_lm/")
    net = _loaded(native.load_bert_tf_checkpoint, source, cfg, model, has_mlm)
    return Source(net, cfg, None, None)


def _read_hf(source, model, bert_config_file):
    import tensorflow as tf
    from bert_tf.convert import hf
    cfg = _flag_config(bert_config_file) or hf.bert_config_from_hf(source)
    vocab = posixpath.join(source, "vocab.txt")
    vocab = vocab if tf.io.gfile.exists(vocab) else None
    has_mlm = model == "auto" and "cls.predictions.bias" in hf.hf_tensor_names(source)
    net = _loaded(hf.load_hf_safetensors, source, cfg, model, has_mlm)
    return Source(net, cfg, vocab, hf.hf_casing(source))


def _read_model_garden(source, model, bert_config_file):
    from bert_tf.convert import model_garden
    flag_cfg = _flag_config(bert_config_file)
    act = flag_cfg.hidden_act if flag_cfg else "gelu"  # not stored in the checkpoint
    cfg, weights = model_garden.read_model_garden_checkpoint(source, hidden_act=act)
    cfg = flag_cfg or cfg
    return Source(_from_weights(source, cfg, weights, model), cfg, None, None)


def _read_tfhub(source, model, bert_config_file):
    from bert_tf.convert import tfhub
    flag_cfg = _flag_config(bert_config_file)
    act = flag_cfg.hidden_act if flag_cfg else "gelu"  # not stored in the SavedModel
    cfg, weights, vocab, lower = tfhub.read_tfhub_encoder(source, hidden_act=act)
    cfg = flag_cfg or cfg
    casing = None if lower is None else (lower, lower)
    return Source(_from_weights(source, cfg, weights, model), cfg, vocab, casing)


def _read_keras_hub(source, model, bert_config_file):
    from bert_tf.convert import interop, keras_hub
    net, vocab, lowercase, strip = keras_hub.load_keras_hub_preset_with_casing(source)
    cfg = _flag_config(bert_config_file)
    if cfg is not None:  # the given config (dropout, initializer...), same shapes
        net = _from_weights(source, cfg, interop.get_weights(net), "encoder")
    return Source(net, cfg or net.bert_config, vocab, (lowercase, strip))


READERS = {"tf1": _read_tf1, "bert_tf": _read_bert_tf, "hf": _read_hf,
           "model_garden": _read_model_garden, "tfhub": _read_tfhub,
           "keras_hub": _read_keras_hub}


def read(from_format, source, model, bert_config_file=None):
    """Reads `source` (a path in format `from_format`) into a Source.

    Args:
        from_format: one of FROM.
        source: checkpoint prefix/directory, HF directory, SavedModel or preset directory.
        model: "pretrainer" or "encoder" (check_model has been called).
        bert_config_file: bert_config.json; required for tf1 and bert_tf, otherwise it
            overrides the source's own (its shapes must agree with the weights).
    """
    return READERS[from_format](source, model, bert_config_file)


# ---- writers ---------------------------------------------------------------------------------

def _untold_casing(fmt, casing):
    lower, strip = casing
    if lower != strip:
        note(f"--to={fmt} records no casing, and this tokenizer's (lower-case "
             f"{lower}, strip accents {strip}) is no --do_lower_case: tokenize with "
             f"FullTokenizer(vocab, do_lower_case={lower}, strip_accents={strip})")


def _checked_vocab(vocab_file, cfg, to_format, required):
    if vocab_file is None:
        if required:
            raise BertError(f"--vocab_file: required for --to={to_format}")
        return None
    from bert_tf.tokenization import check_vocab_size
    check_vocab_size(vocab_file, cfg.vocab_size)  # one check for every output
    return vocab_file


def _config_and_vocab(out, cfg, vocab_file):
    import tensorflow as tf
    cfg.to_json_file(posixpath.join(out, "bert_config.json"))
    if vocab_file is not None:
        tf.io.gfile.copy(vocab_file, posixpath.join(out, "vocab.txt"))


def _write_tf1(net, cfg, out, vocab_file, casing):
    from bert_tf.convert import tf1
    tf1.save_tf1_checkpoint(net, posixpath.join(out, "bert_model.ckpt"))
    _config_and_vocab(out, cfg, vocab_file)
    _untold_casing("tf1", casing)


def _write_model_garden(net, cfg, out, vocab_file, casing):
    from bert_tf.convert import model_garden
    model_garden.save_model_garden_checkpoint(net, posixpath.join(out, "bert_model.ckpt"))
    _config_and_vocab(out, cfg, vocab_file)
    _untold_casing("model_garden", casing)


def _write_hf(net, cfg, out, vocab_file, casing):
    from bert_tf.convert import hf
    lower, strip = casing
    hf.save_hf_directory(net, out, vocab_file, lower,
                         strip_accents=None if strip == lower else strip)


def _write_keras_hub(net, cfg, out, vocab_file, casing):
    from bert_tf.convert import keras_hub
    keras_hub.save_keras_hub_preset(net, vocab_file, casing[0], out, strip_accents=casing[1])


def _write_savedmodel(net, cfg, out, vocab_file, casing):
    from bert_tf import export
    export.export_encoder(net, posixpath.join(out, "encoder"))
    if vocab_file is None:
        note("no vocab: wrote the encoder only (give --vocab_file for the preprocessor)")
    else:
        # packs to what the encoder takes (bert_pack_inputs takes any length)
        export.export_preprocessor(vocab_file, casing[0], posixpath.join(out, "preprocessor"),
                                   seq_length=min(128, cfg.max_position_embeddings),
                                   strip_accents=casing[1])


WRITERS = {"tf1": _write_tf1, "hf": _write_hf, "model_garden": _write_model_garden,
           "keras_hub": _write_keras_hub, "savedmodel": _write_savedmodel}
VOCAB_REQUIRED = ("hf", "keras_hub")


def write(to_format, src, out, casing):
    """Writes the model of Source `src` as `to_format` into the new directory `out`.

    Args:
        to_format: one of TO.
        src: the Source (its vocab_file: the one to write, None for none).
        out: directory to create (must not exist; written in place: the caller renames it).
        casing: (lowercase, strip_accents) recorded in formats that hold one (hf: its
            tokenizer_config.json; keras_hub: tokenizer.json; savedmodel: the preprocessor).
    """
    import tensorflow as tf
    vocab = _checked_vocab(src.vocab_file, src.config, to_format, to_format in VOCAB_REQUIRED)
    if to_format in ("tf1", "model_garden", "savedmodel"):
        tf.io.gfile.makedirs(out)
    WRITERS[to_format](src.net, src.config, out, vocab, casing)
