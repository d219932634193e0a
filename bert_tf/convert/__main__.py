"""Convert BERT weights between formats.

  python -m bert_tf.convert --from=tf1 --source=uncased_L-12_H-768_A-12/bert_model.ckpt \
      --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json \
      --vocab_file=uncased_L-12_H-768_A-12/vocab.txt --to=hf --output=bert-base-hf

Sources: tf1 (original checkpoints), bert_tf (our training checkpoints), hf (a Hugging Face
model directory: config.json, model.safetensors, vocab.txt). Targets: tf1 (a directory with
bert_model.ckpt, bert_config.json, vocab.txt) and hf. `--model=encoder` converts the encoder
only (`BertModel` in HF); the default `pretrainer` needs the source's MLM and NSP heads.
The output directory is written under a temporary name and renamed, never half-written.
"""
import os
import posixpath
import sys
import uuid

from absl import app, flags

import bert_tf  # noqa: F401  (sets KERAS_BACKEND before keras loads)
from bert_tf import BertError

FROM = ("tf1", "bert_tf", "hf")
TO = ("tf1", "hf")


def _config(from_format, source, bert_config_file):
    from bert_tf.convert import hf
    from bert_tf.modeling.config import BertConfig
    if bert_config_file:
        return BertConfig.from_json_file(bert_config_file)
    if from_format == "hf":
        return hf.bert_config_from_hf(source)
    raise BertError(f"--bert_config_file: required with --from={from_format}")


def _source_vocab(from_format, source, vocab_file):
    import tensorflow as tf
    if vocab_file:
        return vocab_file
    if from_format == "hf" and tf.io.gfile.exists(posixpath.join(source, "vocab.txt")):
        return posixpath.join(source, "vocab.txt")
    return None


def convert(from_format, source, to_format, output, bert_config_file=None, vocab_file=None,
            do_lower_case=True, model="pretrainer", overwrite=False):
    """Converts `source` (format `from_format`) into `output` (format `to_format`).

    Args:
        from_format: one of "tf1", "bert_tf", "hf".
        source: checkpoint prefix/directory (tf1, bert_tf) or HF model directory.
        to_format: "tf1" or "hf".
        output: directory to create.
        bert_config_file: bert_config.json (required unless the source is hf).
        vocab_file: vocab.txt (required for hf output; copied into tf1 output if given).
        do_lower_case: bool, written to the HF tokenizer config.
        model: "pretrainer" (encoder + MLM + NSP heads) or "encoder".
        overwrite: replace an existing output directory.

    Returns:
        `output`.
    """
    import tensorflow as tf
    from bert_tf.convert import hf, native, tf1
    from bert_tf.modeling import models
    from bert_tf.modeling.encoder import BertEncoder

    if from_format not in FROM:
        raise BertError(f"--from: unknown format {from_format!r}; expected one of "
                        f"{', '.join(FROM)}")
    if to_format not in TO:
        raise BertError(f"--to: unknown format {to_format!r}; expected one of {', '.join(TO)}")
    if model not in ("pretrainer", "encoder"):
        raise BertError(f"--model: expected pretrainer or encoder, got {model!r}")
    output = output.rstrip("/")
    if tf.io.gfile.exists(output) and not overwrite:
        raise BertError(f"{output}: already exists (pass --overwrite to replace it)")
    cfg = _config(from_format, source, bert_config_file)
    vocab = _source_vocab(from_format, source, vocab_file)
    if to_format == "hf" and vocab is None:
        raise BertError("--vocab_file: required for --to=hf")
    encoder = BertEncoder.from_bert_config(cfg, name="encoder")
    net = models.ensure_built(encoder if model == "encoder" else models.BertPretrainer(encoder))
    load = {"tf1": tf1.load_tf1_checkpoint, "bert_tf": native.load_bert_tf_checkpoint,
            "hf": hf.load_hf_safetensors}[from_format]
    report = load(net, source)
    if report["missing"]:
        raise BertError(f"{source}: has no {', '.join(report['missing'][:3])}"
                        f"{' ...' if len(report['missing']) > 3 else ''} (an encoder-only "
                        f"checkpoint? use --model=encoder)")
    if to_format == "hf":
        return hf.save_hf_directory(net, output, vocab, do_lower_case, overwrite=overwrite)
    tmp = f"{output}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tf1.save_tf1_checkpoint(net, posixpath.join(tmp, "bert_model.ckpt"))
        cfg.to_json_file(posixpath.join(tmp, "bert_config.json"))
        if vocab is not None:
            hf._vocab_lines(vocab, cfg.vocab_size)  # same check as the HF export
            tf.io.gfile.copy(vocab, posixpath.join(tmp, "vocab.txt"))
        if tf.io.gfile.exists(output):
            tf.io.gfile.rmtree(output)
        tf.io.gfile.rename(tmp, output)
    finally:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.rmtree(tmp)
    return output


def _define_flags():
    """Flags of the command line only: importing this module defines none (it would
    clash with other modules' flags of the same name in one process)."""
    flags.DEFINE_enum("from", None, list(FROM), "Format of --source.")
    flags.DEFINE_string("source", None, "Checkpoint prefix/directory, or a HF model directory.")
    flags.DEFINE_enum("to", None, list(TO), "Format to write.")
    flags.DEFINE_string("output", None, "Output directory (must not exist unless --overwrite).")
    flags.DEFINE_string("bert_config_file", None, "bert_config.json (not needed for --from=hf).")
    flags.DEFINE_string("vocab_file", None, "vocab.txt (default for --from=hf: the source's).")
    flags.DEFINE_bool("do_lower_case", True, "Written to the HF tokenizer_config.json.")
    flags.DEFINE_enum("model", "pretrainer", ["pretrainer", "encoder"],
                      "Convert the encoder with its pre-training heads, or the encoder only.")
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output.")


def main(argv):
    """absl main: converts --source to --output; a BertError exits with one `error:` line."""
    del argv
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


if __name__ == "__main__":
    _define_flags()
    app.run(main)
