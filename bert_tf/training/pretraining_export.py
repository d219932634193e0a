"""What run_pretraining.py exports at the end of training (and in its separate export step).

Without --vocab_file: the ids-in encoder SavedModel in export_dir (TF Hub encoder convention).
With it, the TF Serving layout `<export_dir>/<model_name>.../<version>/`, one version number
for all four, each with warm-up requests in assets.extra/:

  <model_name>               text in -> fill-mask (top-k tokens per [MASK])
  <model_name>_embeddings    text in -> pooled_output / sequence_output
  <model_name>_preprocessor  text in -> int32 encoder inputs (TF Hub preprocessor)
  <model_name>_encoder       int32 inputs -> encoder outputs (TF Hub encoder)

Both encoder exports carry the `mlm` sub-model (masked-LM logits, as Model Garden's
`export_tfhub_lib` with_mlm=True); with --vocab_file also its `vocab_file` asset and
`do_lower_case`.
"""
import logging
import posixpath

import tensorflow as tf

from bert_tf import BertError

log = logging.getLogger("bert_tf")

SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[MASK]")
SUFFIXES = ("", "_embeddings", "_preprocessor", "_encoder")


def check_vocab(options, bert_config):
    """One-line BertError unless --vocab_file fits the config (before any training step).

    Args:
        options: PretrainingOptions (vocab_file may be None: nothing to check).
        bert_config: the model's BertConfig.
    """
    if not options.vocab_file:
        return
    from bert_tf.tokenization import check_vocab_size
    if not tf.io.gfile.exists(options.vocab_file):
        raise BertError(f"--vocab_file={options.vocab_file}: file not found")
    tokens = check_vocab_size(options.vocab_file, bert_config.vocab_size,
                              options.bert_config_file or "the model")
    missing = [t for t in SPECIAL_TOKENS if t not in set(tokens)]
    if missing:
        raise BertError(f"--vocab_file={options.vocab_file}: no {', '.join(missing)} token "
                        "(a BERT vocab needs [CLS], [SEP] and [MASK])")


def _with_warmup(export_fn, final_dir, requests):
    """export_fn(tmp_dir) writes a SavedModel; add warm-up requests; rename to final_dir (TF
    Serving never loads the non-numeric temp folder)."""
    from bert_tf import fileio
    from bert_tf.export import common, serving
    with fileio.atomic_dir(final_dir, create=False, replace=False) as tmp:
        export_fn(tmp)
        serving.write_warmup_file(common.join(tmp, common.EXTRA_DIR, serving.WARMUP_FILE),
                                  requests)
    return final_dir


def export_pretrained(model, export_dir, options):
    """Export a trained BertPretrainer as described in the module docstring.

    Args:
        model: the BertPretrainer.
        export_dir: the encoder SavedModel (no vocab) or the TF Serving base folder.
        options: PretrainingOptions (vocab_file, do_lower_case, max_seq_length, model_name).
    Returns:
        export_dir.
    """
    from bert_tf import export
    if not options.vocab_file:
        export.export_encoder(model, export_dir, with_mlm=True)
        log.info("exported the ids-in encoder to %s; for text-in models (TF Hub preprocessor "
                 "+ encoder, fill-mask, embeddings) add --vocab_file and --do_lower_case",
                 export_dir)
        return export_dir
    from bert_tf.export import serving
    name, seq = options.model_name, options.max_seq_length
    vocab, lower = options.vocab_file, options.do_lower_case
    names = [name + s for s in SUFFIXES]
    version = max(serving.next_version(posixpath.join(export_dir, n)) for n in names)
    for task, model_name in (("fill_mask", names[0]), ("embeddings", names[1])):
        serving.export_for_serving(export_dir, model_name, version, model=model,
                                   vocab_file=vocab, do_lower_case=lower, task=task,
                                   seq_length=seq)
    texts = tf.constant([t.encode() for t in serving.DEFAULT_WARMUP_TEXTS])
    pre_dir, enc_dir = (posixpath.join(export_dir, n, str(version)) for n in names[2:])

    _with_warmup(lambda d: export.export_preprocessor(vocab, lower, d, seq), pre_dir, [
        serving.predict_request(names[2], "serving_default", {"text": texts[:1]}),
        serving.predict_request(names[2], "serving_default", {"text": texts})])
    # The encoder's warm-up inputs: the exported preprocessor's ids of the same texts.
    ids = {k: v.numpy() for k, v in
           tf.saved_model.load(pre_dir).signatures["serving_default"](text=texts).items()}
    requests = [
        serving.predict_request(names[3], "serving_default", {k: v[:1] for k, v in ids.items()}),
        serving.predict_request(names[3], "serving_default", ids)]
    _with_warmup(lambda d: export.export_encoder(model, d, vocab, lower, with_mlm=True),
                 enc_dir, requests)
    log.info("exported %s/{%s}/%d", export_dir, ",".join(names), version)
    return export_dir
