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
Config, vocab and casing come from the source where its format carries them (hf, tfhub,
keras_hub), else from --bert_config_file / --vocab_file / --do_lower_case; a given flag wins.
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
from bert_tf.convert import cli_formats
from bert_tf.convert.cli_formats import FROM, TO  # noqa: F401  (re-exported)


def convert(from_format, source, to_format, output, bert_config_file=None, vocab_file=None,
            do_lower_case=None, model=None, overwrite=False):
    """Converts `source` (format `from_format`) into `output` (format `to_format`).

    Args:
        from_format: one of "tf1", "bert_tf", "hf", "model_garden", "tfhub", "keras_hub".
        source: checkpoint prefix/directory (tf1, bert_tf, model_garden), HF model directory,
            TF Hub encoder SavedModel or keras-hub preset directory.
        to_format: one of "tf1", "hf", "model_garden", "keras_hub", "savedmodel".
        output: directory to create.
        bert_config_file: bert_config.json (required for tf1 and bert_tf sources; for the
            others it replaces the source's config, whose shapes it must match).
        vocab_file: vocab.txt (default: the source's, for hf, tfhub and keras_hub; required
            for hf and keras_hub output; copied into the others).
        do_lower_case: bool, or None for the source's casing (hf, tfhub, keras_hub; else
            True); recorded by hf, keras_hub and the savedmodel preprocessor.
        model: "pretrainer" (encoder + MLM + NSP heads), "encoder", or None: pretrainer
            where both formats hold heads, else encoder.
        overwrite: replace an existing output directory.

    Returns:
        `output`.
    """
    import tensorflow as tf

    if from_format not in FROM:
        raise BertError(f"--from: unknown format {from_format!r}; expected one of "
                        f"{', '.join(FROM)}")
    if to_format not in TO:
        raise BertError(f"--to: unknown format {to_format!r}; expected one of {', '.join(TO)}")
    model = model or cli_formats.default_model(from_format, to_format)
    cli_formats.check_model(from_format, to_format, model)
    output = output.rstrip("/")
    if tf.io.gfile.exists(output) and not overwrite:
        raise BertError(f"{output}: already exists (pass --overwrite to replace it)")
    if to_format in cli_formats.VOCAB_REQUIRED and not vocab_file \
            and from_format not in cli_formats.VOCAB_FROM:
        raise BertError(f"--vocab_file: required for --to={to_format}")
    src = cli_formats.read(from_format, source, model, bert_config_file)
    if vocab_file:
        src = src._replace(vocab_file=vocab_file)
    if do_lower_case is not None:
        casing = (bool(do_lower_case), bool(do_lower_case))
    else:
        casing = src.casing or (True, True)
    from bert_tf import fileio
    with fileio.atomic_dir(output, create=False) as tmp:  # each writer makes its directory
        cli_formats.write(to_format, src, tmp, casing)
    return output


def _define_flags():
    """Flags of the command line only: importing this module defines none (it would
    clash with other modules' flags of the same name in one process). Idempotent."""
    if "source" in flags.FLAGS:
        return
    flags.DEFINE_enum("from", None, list(FROM), "Format of --source.")
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
        for name in ("from", "source", "to", "output"):
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
