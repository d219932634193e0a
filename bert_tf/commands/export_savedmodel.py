r"""Export a BERT checkpoint as SavedModels (preprocessor / encoder / end-to-end / TF Serving).

  bert-export-savedmodel --bert_config_file=bert_config.json --vocab_file=vocab.txt \
      --init_checkpoint=bert_model.ckpt --task=fill_mask \
      --export_base=export --model_name=bert_fill_mask          # export/bert_fill_mask/<next>/

  --kind=preprocessor|encoder with --export_dir=DIR writes the TF Hub-style pieces instead.
  --init_checkpoint=clf.keras (any bert_tf model saved with `model.save`) exports that model
  with its own task, config, vocab, casing and seq_length: no other flag is needed.
(In the checkout, `python export_savedmodel.py` is the same command.) Serving the result:
`python -m bert_tf.resources serving` prints the guide.
"""
import sys

from absl import app, flags

import bert_tf  # noqa: F401  (sets KERAS_BACKEND before keras loads)
from bert_tf import BertError
from bert_tf.commands import exit_zero_on_help, show_in_help

FLAGS = flags.FLAGS
_defined = False


def define_flags():
    """The command's flags (once per process)."""
    global _defined
    if _defined:
        return
    _defined = True
    flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model.")
    flags.DEFINE_string("init_checkpoint", None, "Checkpoint to export (any format "
                        "from_pretrained reads), or a .keras file of a bert_tf model (exported "
                        "with its own task, config and vocab). Random weights if unset.")
    flags.DEFINE_string("vocab_file", None, "vocab.txt the model was trained with.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case (and strip accents from) the input text.")
    flags.DEFINE_enum("kind", "end_to_end", ["end_to_end", "encoder", "preprocessor"],
                      "What to export.")
    flags.DEFINE_string("export_dir", None, "Write the SavedModel here (replaced if it exists).")
    flags.DEFINE_string("export_base", None, "TF Serving layout: write "
                        "<export_base>/<model_name>/<version>/ (end_to_end).")
    flags.DEFINE_string("model_name", "bert", "Model name under --export_base.")
    flags.DEFINE_integer("version", None, "Version under --export_base (default: next integer).")
    flags.DEFINE_enum("task", "embeddings", ["embeddings", "fill_mask", "classification",
                                             "regression", "span", "tagging"],
                      "Task outputs of the end-to-end export.")
    flags.DEFINE_integer("seq_length", 128, "Sequence length the text signatures pack to.")
    flags.DEFINE_list("labels", None, "classification/tagging: label strings, in logit order "
                      "(sets the class count).")
    flags.DEFINE_integer("num_labels", None,
                         "classification/tagging: class count when --labels is not given.")
    flags.DEFINE_integer("top_k", 5, "fill_mask: candidates per [MASK].")
    flags.DEFINE_integer("max_masks", 8, "fill_mask: [MASK] positions answered per text.")
    flags.DEFINE_integer("max_answer_length", 30, "span: longest answer in wordpieces.")
    flags.DEFINE_enum("pooling", None, ["cls", "cls_token", "mean"], "embeddings: how the "
                      "`embedding` output pools: cls (the pooler, = pooled_output), cls_token "
                      "(the [CLS] vector) or mean (masked mean). Default: a .keras "
                      "embedder's own, else cls.")
    flags.DEFINE_bool("normalize", None, "embeddings: L2-normalise the `embedding` output "
                      "(default: a .keras embedder's own, else no).")
    flags.DEFINE_bool("with_mlm", False, "--kind=encoder: also export the `mlm` sub-model "
                      "(mlm_logits), as Model Garden's TF Hub exports; loads the checkpoint's "
                      "masked-LM head.")
    show_in_help(__name__)


def build_model(cfg, task, num_labels):
    """The model an export of `task` needs: an encoder, or a task model around one.

    Args:
        cfg: the BertConfig.
        task: the export's task (--task; "embeddings" for --kind=encoder).
        num_labels: class count of classification/tagging models.
    """
    from bert_tf.export import common
    from bert_tf.modeling.encoder import BertEncoder
    from bert_tf.modeling.models import ensure_built
    encoder = BertEncoder.from_bert_config(cfg, name="encoder")
    if task == "embeddings":
        return ensure_built(encoder)
    if task in ("classification", "tagging") and not num_labels:
        raise BertError(f"--task={task}: give --labels or --num_labels")
    args = {"classification": (num_labels,), "regression": (1,),
            "tagging": (num_labels,)}.get(task, ())
    return ensure_built(common.TASK_MODEL_CLASSES[task](encoder, *args))


def _explicit(name):
    return FLAGS[name].present


def export_keras_file(model):
    """The export of a .keras --init_checkpoint (`model`, as read): its own model, task and
    text settings; flags that contradict the file are one-line errors."""
    import tensorflow as tf
    from bert_tf.export import keras_export
    from bert_tf.export.serving import next_version
    from bert_tf.export.common import join
    from bert_tf.convert import formats
    from bert_tf.modeling.models import find_encoder
    from bert_tf.tokenization import vocab_tokens
    path = FLAGS.init_checkpoint
    inner, tokens, lower, _, _ = keras_export.unwrap(model)
    own_task = keras_export.task_of(inner)
    cfg = find_encoder(inner).bert_config
    if FLAGS.bert_config_file and (formats.read_config(FLAGS.bert_config_file).to_dict()
                                   != cfg.to_dict()):
        raise BertError(f"--bert_config_file {FLAGS.bert_config_file}: differs from the config "
                        f"in {path} (leave it out)")
    if tokens is not None and FLAGS.vocab_file and vocab_tokens(FLAGS.vocab_file) != tokens:
        raise BertError(f"--vocab_file {FLAGS.vocab_file}: differs from the vocab in {path} "
                        f"(leave it out)")
    if tokens is not None and _explicit("do_lower_case") and FLAGS.do_lower_case != lower:
        raise BertError(f"--do_lower_case={FLAGS.do_lower_case}: {path} was saved with "
                        f"do_lower_case={lower}")
    task = FLAGS.task if _explicit("task") else own_task
    if task not in (own_task, "embeddings"):
        raise BertError(f"--task={task}: {path} holds a {type(inner).__name__} ({own_task}); "
                        f"leave --task out, or use --task=embeddings")
    if FLAGS.kind == "encoder":
        from bert_tf import export
        return export.export_encoder(inner, FLAGS.export_dir)
    vocab_file = FLAGS.vocab_file if tokens is None else None
    if tokens is None and not vocab_file:
        print(f"note: {path} is an ids-in model and no --vocab_file was given: the export "
              f"takes ids (input_word_ids, input_mask, input_type_ids)", file=sys.stderr)
    if FLAGS.export_base:
        model_dir = join(FLAGS.export_base, FLAGS.model_name)
        target = join(model_dir, str(FLAGS.version or next_version(model_dir)))
        if FLAGS.version is not None and tf.io.gfile.exists(target):
            raise BertError(f"{target}: version {FLAGS.version} already exists (versions are "
                            f"immutable once served; pick another --version)")
    else:
        target = FLAGS.export_dir
    return keras_export.export_model(
        model, target, vocab_file=vocab_file,
        do_lower_case=FLAGS.do_lower_case if vocab_file else None, task=task,
        seq_length=FLAGS.seq_length if _explicit("seq_length") else None, labels=FLAGS.labels,
        pooling=FLAGS.pooling, normalize=FLAGS.normalize, top_k=FLAGS.top_k,
        max_masks=FLAGS.max_masks, max_answer_length=FLAGS.max_answer_length,
        model_name=FLAGS.model_name if FLAGS.export_base else None, verbose=False)


def run():
    """Writes the export the parsed flags ask for; returns its path."""
    from bert_tf import export
    from bert_tf.convert import formats
    from bert_tf.export import serving
    from bert_tf.convert.handoff import bert_config as config_of, fill_flags
    # --init_checkpoint supplies config, vocab and casing it carries; its Source, read once,
    # is what the export loads
    src = fill_flags(FLAGS)

    if FLAGS.kind == "preprocessor":
        if not FLAGS.vocab_file or not FLAGS.export_dir:
            raise BertError("--kind=preprocessor: needs --vocab_file and --export_dir")
        return export.export_preprocessor(FLAGS.vocab_file, FLAGS.do_lower_case,
                                          FLAGS.export_dir, FLAGS.seq_length)
    if bool(FLAGS.export_dir) == bool(FLAGS.export_base):
        raise BertError("--export_dir/--export_base: give exactly one")
    if FLAGS.kind == "encoder" and FLAGS.export_base:
        raise BertError("--export_base: only for --kind=end_to_end; use --export_dir")
    if src is not None and src.model is not None:  # a .keras file: its own model and task
        return export_keras_file(src.model)
    if not FLAGS.bert_config_file:
        raise BertError("--bert_config_file: required")
    if FLAGS.kind == "end_to_end" and not FLAGS.vocab_file:
        raise BertError("--vocab_file: required for --kind=end_to_end")
    cfg = config_of(FLAGS, src)  # the Source's own config where it gave it: not read again
    num_labels = len(FLAGS.labels) if FLAGS.labels else FLAGS.num_labels
    task = "embeddings" if FLAGS.kind == "encoder" else FLAGS.task
    if FLAGS.with_mlm:
        if FLAGS.kind != "encoder":
            raise BertError("--with_mlm: only for --kind=encoder")
        task = "fill_mask"  # the pretrainer: encoder + the masked-LM head the mlm signature uses
    model = build_model(cfg, task, num_labels)
    if src is not None:
        src.load(model)
    else:
        print("warning: no --init_checkpoint, exporting random weights", file=sys.stderr)
    if FLAGS.kind == "encoder":
        # The vocab and casing travel with the encoder (assets), as in Model Garden's exports.
        return export.export_encoder(
            model, FLAGS.export_dir, vocab_file=FLAGS.vocab_file or None,
            do_lower_case=FLAGS.do_lower_case if FLAGS.vocab_file else None,
            with_mlm=FLAGS.with_mlm)
    pooling, normalize = FLAGS.pooling, FLAGS.normalize
    if task == "embeddings" and src is not None:  # as from_pretrained(task="embeddings")
        st_pooling, st_normalize = src.pooling(pooling is None)
        pooling = pooling or st_pooling
        normalize = st_normalize if normalize is None else normalize
    seq_length = FLAGS.seq_length
    if src is not None and src.max_seq_length and not _explicit("seq_length"):
        seq_length = min(src.max_seq_length, cfg.max_position_embeddings)
    kwargs = dict(task=task, seq_length=seq_length, labels=FLAGS.labels,
                  top_k=FLAGS.top_k, max_masks=FLAGS.max_masks,
                  max_answer_length=FLAGS.max_answer_length, pooling=pooling,
                  normalize=normalize)
    if FLAGS.export_base:
        return serving.export_for_serving(FLAGS.export_base, FLAGS.model_name, FLAGS.version,
                                          model=model, vocab_file=FLAGS.vocab_file,
                                          do_lower_case=FLAGS.do_lower_case, **kwargs)
    return export.export_end_to_end(model, FLAGS.vocab_file, FLAGS.do_lower_case,
                                    FLAGS.export_dir, **kwargs)


def app_main(argv):
    """Exports with the parsed flags; a BertError exits with one `error: ...` line."""
    del argv
    try:
        path = run()
    except BertError as e:
        sys.exit(f"error: {e}")
    print(f"exported {path}")


def main():
    """The `bert-export-savedmodel` command (flags from sys.argv)."""
    define_flags()
    exit_zero_on_help(lambda: app.run(app_main))


if __name__ == "__main__":
    main()
