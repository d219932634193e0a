"""Convert BERT weights between formats.

  python -m bert_tf.convert --from=tf1 --source=uncased_L-12_H-768_A-12/bert_model.ckpt \
      --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json \
      --vocab_file=uncased_L-12_H-768_A-12/vocab.txt --to=hf --output=bert-base-hf

Sources (--from): tf1 (original checkpoints), bert_tf (our training checkpoints), hf (a Hugging
Face model directory: config.json, model.safetensors, vocab.txt), model_garden (a Model Garden
TF2 checkpoint), tfhub (a TF Hub / export_tfhub_lib encoder SavedModel), keras_hub (a keras-hub
BERT preset directory). Targets (--to): tf1 (bert_model.ckpt, bert_config.json, vocab.txt), hf,
model_garden (the same three files, Model Garden's checkpoint layout), keras_hub (a preset) and
savedmodel (our TF Hub-style `encoder/` SavedModel, plus `preprocessor/` when a vocab is known).
--from=auto (the default) takes whatever the source is (`bert_tf.convert.formats` detects it).
Config, vocab and casing come from the source where it carries them (as `from_pretrained`
reads it), else from --bert_config_file / --vocab_file / --do_lower_case; a given flag wins.
`--model=encoder` converts the encoder only (`BertModel` in HF); `pretrainer` (the default
where both formats hold them) needs the source's MLM and NSP heads. Model Garden output and
keras-hub in or out need the peers (`pip install "bert_tf[keras-hub]"`; Model Garden: see
`bert_tf.convert.interop.PEER_INSTALL`).
The output directory is written under a temporary name and renamed, never half-written.
"""
import sys

from absl import app, flags

import bert_tf  # noqa: F401  (sets KERAS_BACKEND before keras loads)
from bert_tf import BertError
from bert_tf.convert import formats
from bert_tf.convert.source import note

FROM = tuple(formats.names(readable=True)) + ("auto",)
TO = tuple(formats.names(readable=False))
NSP = "cls/seq_relationship/"


def _model_kind(fmt_from, fmt_to, model, src, names):
    """"pretrainer" or "encoder": --model, or (None/"auto") the pretrainer where both formats
    hold heads and the source has the MLM head."""
    if model not in (None, "auto", "pretrainer", "encoder"):
        raise BertError(f"--model: expected pretrainer or encoder, got {model!r}")
    if model == "pretrainer":
        if not fmt_from.heads:
            raise BertError(f"--model=pretrainer: --from={names[0]} holds no pre-training "
                            "heads (encoder only); pass --model=encoder")
        if not fmt_to.heads:
            raise BertError(f"--model=pretrainer: --to={names[1]} holds the encoder only; "
                            "pass --model=encoder")
        return model
    if model == "encoder" or not (fmt_from.heads and fmt_to.heads):
        return "encoder"
    if src.has_mlm():
        return "pretrainer"
    note(f"{src.path} has no pre-training heads: converting the encoder")
    return "encoder"


def _net(src, kind):
    """A new bert_tf model for the source's config holding its weights."""
    from bert_tf.convert.interop import build_bert_model, get_weights, set_weights
    net = build_bert_model(src.bert_config, with_pretraining_heads=kind == "pretrainer")
    fresh = {k: v for k, v in get_weights(net).items() if k.startswith(NSP)}
    report = src.load(net)
    missing = [n for n in report["missing"] if not n.startswith(NSP)]
    if missing:
        raise BertError(f"{src.path}: has no {', '.join(missing[:3])}"
                        f"{' ...' if len(missing) > 3 else ''} (pass --model=encoder to "
                        f"convert the encoder only)")
    if report["missing"]:  # an MLM-only source (HF BertForMaskedLM): NSP head initialised
        note(f"{src.path} has no next-sentence head: the output's is freshly initialised")
        set_weights(net, dict(get_weights(net), **fresh), src.path)
    return net


def convert(from_format, source, to_format, output, bert_config_file=None, vocab_file=None,
            do_lower_case=None, model=None, overwrite=False):
    """Converts `source` into `output` (format `to_format`).

    Args:
        from_format: a name in FROM (the source must be that format; "auto" or None:
            whatever it is).
        source: checkpoint prefix/directory, HF model directory, SavedModel, keras-hub
            preset directory or .keras file.
        to_format: a name in TO.
        output: directory to create.
        bert_config_file: a config file over the source's (its shapes must match the
            weights); needed only where the source carries no config.
        vocab_file: vocab.txt (default: the source's; needed for outputs that hold one).
        do_lower_case: bool, or None for the source's casing (else True); recorded by the
            formats that hold one.
        model: "pretrainer" (encoder + MLM + NSP heads), "encoder", or None: pretrainer
            where both formats hold heads and the source has them, else encoder.
        overwrite: replace an existing output directory.

    Returns:
        `output`.
    """
    import tensorflow as tf
    from bert_tf import fileio

    if from_format not in (None, *FROM):
        raise BertError(f"--from: unknown format {from_format!r}; expected one of "
                        f"{', '.join(FROM)}")
    if to_format not in TO:
        raise BertError(f"--to: unknown format {to_format!r}; expected one of {', '.join(TO)}")
    fmt_to = formats.by_name(to_format)
    output = output.rstrip("/")
    if tf.io.gfile.exists(output) and not overwrite:
        raise BertError(f"{output}: already exists (pass --overwrite to replace it)")
    expect = None if from_format in (None, "auto") else from_format
    if model == "pretrainer" and expect and not formats.by_name(expect).heads:
        _model_kind(formats.by_name(expect), fmt_to, model, None, (expect, to_format))
    src = formats.read(source, bert_config_file, vocab_file, do_lower_case, expect=expect,
                       flags=True)
    fmt_from = formats.by_name(src.format)
    if fmt_to.needs_vocab and src.vocab_file is None:
        raise BertError(f"--vocab_file: required for --to={to_format}")
    net = _net(src, _model_kind(fmt_from, fmt_to, model, src, (src.format, to_format)))
    casing = (src.do_lower_case, src.strip_accents)
    with fileio.atomic_dir(output, create=False) as tmp:  # each writer makes its directory
        fmt_to.write(net, src.bert_config, tmp, src.vocab_file, casing)
    return output


def _define_flags():
    """Flags of the command line only: importing this module defines none (it would
    clash with other modules' flags of the same name in one process). Idempotent."""
    if "source" in flags.FLAGS:
        return
    flags.DEFINE_enum("from", "auto", list(FROM), "Format of --source (auto: detected).")
    flags.DEFINE_string("source", None, "Checkpoint prefix/directory, HF model directory, TF "
                        "Hub encoder SavedModel or keras-hub preset directory.")
    flags.DEFINE_enum("to", None, list(TO), "Format to write.")
    flags.DEFINE_string("output", None, "Output directory (must not exist unless --overwrite).")
    flags.DEFINE_string("bert_config_file", None,
                        "bert_config.json (required for --from=tf1|bert_tf; for the other "
                        "formats it replaces the source's own config).")
    flags.DEFINE_string("vocab_file", None,
                        "vocab.txt (default for --from=hf|tfhub|keras_hub: the source's).")
    flags.DEFINE_bool("do_lower_case", None,
                      "Casing written to hf/keras_hub/savedmodel outputs (default: the "
                      "source's for --from=hf|tfhub|keras_hub, else True).")
    flags.DEFINE_enum("model", None, ["pretrainer", "encoder"],
                      "Convert the encoder with its pre-training heads, or the encoder only "
                      "(default: pretrainer where both formats hold heads, else encoder).")
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output.")


def _run(argv):
    """absl main: converts --source to --output; a BertError exits with one `error:` line."""
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {' '.join(argv[1:])!r}")
    f = flags.FLAGS
    try:
        for name in ("source", "to", "output"):
            if not f[name].value:
                raise BertError(f"--{name}: required")
        path = convert(f["from"].value, f.source, f.to, f.output, f.bert_config_file,
                       f.vocab_file, f.do_lower_case, f.model, f.overwrite)
    except BertError as e:
        sys.exit(f"error: {e}")
    print(f"wrote {path}")


def main(argv=None):
    """The command (and the `bert-convert` console entry point): defines this module's flags
    and runs it as an absl app on `argv` (default: sys.argv)."""
    _define_flags()
    app.run(_run, argv=argv)


if __name__ == "__main__":
    main()
