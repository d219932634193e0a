"""What run_pretraining exports at the end of training (`bert_tf.exporter("pretrained")`;
training reaches it through that seam, see `bert_tf.pretraining.pretraining_export`).

Without --vocab_file: the ids-in encoder SavedModel in export_dir (TF Hub encoder convention).
With it, the TF Serving layout `<export_dir>/<model_name>.../<version>/` (see
`bert_tf.pretraining.pretraining_export`). The `_embeddings` model pools as the model read by
--init_checkpoint declares (a sentence-transformers directory: its pooling and Normalize),
as `from_pretrained(task="embeddings")` does; else BERT's pooler.
"""
import logging
import posixpath

import tensorflow as tf

log = logging.getLogger("bert_tf")

SUFFIXES = ("", "_embeddings", "_preprocessor", "_encoder")


# What each model of the TF Serving layout serves (the lines run_pretraining prints last).
SERVES = ("text in -> fill-mask", "text in -> embeddings",
          "text in -> encoder inputs: TF Hub preprocessor",
          "encoder inputs -> encoder outputs: TF Hub encoder")


def export_lines(export_dir, options):
    """One `exported ...` line per model `export_pretrained` wrote under export_dir (with
    --vocab_file: the newest version of each of the four).

    Args:
        export_dir: what `export_pretrained` returned.
        options: the same PretrainingOptions.
    """
    if not options.vocab_file:
        return [f"exported the encoder to {export_dir} (ids in; add --vocab_file for text-in "
                "models)"]
    lines = []
    for suffix, serves in zip(SUFFIXES, SERVES):
        base = posixpath.join(export_dir, options.model_name + suffix)
        names = tf.io.gfile.listdir(base) if tf.io.gfile.isdir(base) else []
        versions = sorted(int(n.rstrip("/")) for n in names if n.rstrip("/").isdigit())
        if versions:  # the newest: this run's (TF Serving versions only grow)
            lines.append(f"exported {posixpath.join(base, str(versions[-1]))} ({serves})")
    return lines


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


def embedding_pooling(source):
    """{pooling, normalize} of the source's sentence-transformers settings ({} for none).

    Args:
        source: the `Source` the command read for --init_checkpoint (not read again), or
            the --init_checkpoint path, or None.
    """
    if not source:
        return {}
    from bert_tf.convert import formats
    pooling, normalize = formats.pooling_of(source)
    return {"pooling": pooling, "normalize": normalize} if pooling or normalize else {}


def export_pretrained(model, export_dir, options, init_source=None):
    """Export a trained BertPretrainer as described in the module docstring.

    Args:
        model: the BertPretrainer.
        export_dir: the encoder SavedModel (no vocab) or the TF Serving base folder.
        options: PretrainingOptions (vocab_file, do_lower_case, max_seq_length, model_name,
            init_checkpoint).
        init_source: the `Source` the command read for init_checkpoint (its pooling, not
            read again), or None: init_checkpoint is read for it.
    Returns:
        export_dir.
    """
    from bert_tf import export
    from bert_tf.export import serving
    from bert_tf.export.preprocessor import TextPreprocessor
    if not options.vocab_file:
        export.export_encoder(model, export_dir, with_mlm=True)
        log.info("exported the ids-in encoder to %s; for text-in models (TF Hub preprocessor "
                 "+ encoder, fill-mask, embeddings) add --vocab_file and --do_lower_case",
                 export_dir)
        return export_dir
    name, seq = options.model_name, options.max_seq_length
    vocab, lower = options.vocab_file, options.do_lower_case
    names = [name + s for s in SUFFIXES]
    version = max(serving.next_version(posixpath.join(export_dir, n)) for n in names)
    pooled = embedding_pooling(init_source or getattr(options, "init_checkpoint", None))
    # One in-graph tokenizer for the three text-in models: traced once, not once per model.
    shared = TextPreprocessor(vocab, lower, seq)
    for task, model_name, extra in (("fill_mask", names[0], {}),
                                    ("embeddings", names[1], pooled)):
        serving.export_for_serving(export_dir, model_name, version, model=model,
                                   vocab_file=vocab, do_lower_case=lower, task=task,
                                   seq_length=seq, preprocessing=shared, **extra)
    texts = tf.constant([t.encode() for t in serving.DEFAULT_WARMUP_TEXTS])
    pre_dir, enc_dir = (posixpath.join(export_dir, n, str(version)) for n in names[2:])

    def write_preprocessor(d):
        return export.export_preprocessor(vocab, lower, d, seq, preprocessing=shared)

    _with_warmup(write_preprocessor, pre_dir, [
        serving.predict_request(names[2], "serving_default", {"text": texts[:1]}),
        serving.predict_request(names[2], "serving_default", {"text": texts})])
    # The encoder's warm-up inputs: the ids the exported preprocessor's serving_default gives
    # for the same texts (the same traced tokenizer and packer, without loading the export).
    ids = {k: v.numpy() for k, v in shared.text_to_ids(texts).items()}
    requests = [
        serving.predict_request(names[3], "serving_default", {k: v[:1] for k, v in ids.items()}),
        serving.predict_request(names[3], "serving_default", ids)]
    _with_warmup(lambda d: export.export_encoder(model, d, vocab, lower, with_mlm=True),
                 enc_dir, requests)
    log.info("exported %s/{%s}/%d", export_dir, ",".join(names), version)
    return export_dir
