r"""Export a BERT checkpoint as SavedModels (preprocessor / encoder / end-to-end / TF Serving).

  bert-export-savedmodel --bert_config_file=bert_config.json --vocab_file=vocab.txt \
      --init_checkpoint=bert_model.ckpt --task=fill_mask \
      --export_base=export --model_name=bert_fill_mask          # export/bert_fill_mask/<next>/

  --kind=preprocessor|encoder with --export_dir=DIR writes the TF Hub-style pieces instead.
(In the checkout, `python export_savedmodel.py` is the same command.) See export/README.md
for serving the result.
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
    flags.DEFINE_string("init_checkpoint", None, "Checkpoint to export (original TF1 or bert_tf). "
                        "Random weights if unset.")
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


def run():
    """Writes the export the parsed flags ask for; returns its path."""
    from bert_tf import export
    from bert_tf.modeling.config import BertConfig
    from bert_tf.export import serving

    if FLAGS.kind == "preprocessor":
        if not FLAGS.vocab_file or not FLAGS.export_dir:
            raise BertError("--kind=preprocessor: needs --vocab_file and --export_dir")
        return export.export_preprocessor(FLAGS.vocab_file, FLAGS.do_lower_case,
                                          FLAGS.export_dir, FLAGS.seq_length)
    if not FLAGS.bert_config_file:
        raise BertError("--bert_config_file: required")
    if bool(FLAGS.export_dir) == bool(FLAGS.export_base):
        raise BertError("--export_dir/--export_base: give exactly one")
    if FLAGS.kind == "encoder" and FLAGS.export_base:
        raise BertError("--export_base: only for --kind=end_to_end; use --export_dir")
    if FLAGS.kind == "end_to_end" and not FLAGS.vocab_file:
        raise BertError("--vocab_file: required for --kind=end_to_end")
    cfg = BertConfig.from_json_file(FLAGS.bert_config_file)
    num_labels = len(FLAGS.labels) if FLAGS.labels else FLAGS.num_labels
    task = "embeddings" if FLAGS.kind == "encoder" else FLAGS.task
    if FLAGS.with_mlm:
        if FLAGS.kind != "encoder":
            raise BertError("--with_mlm: only for --kind=encoder")
        task = "fill_mask"  # the pretrainer: encoder + the masked-LM head the mlm signature uses
    model = build_model(cfg, task, num_labels)
    if FLAGS.init_checkpoint:
        from bert_tf.convert.checkpoints import load_checkpoint
        load_checkpoint(model, FLAGS.init_checkpoint)
    else:
        print("warning: no --init_checkpoint, exporting random weights", file=sys.stderr)
    if FLAGS.kind == "encoder":
        # The vocab and casing travel with the encoder (assets), as in Model Garden's exports.
        return export.export_encoder(
            model, FLAGS.export_dir, vocab_file=FLAGS.vocab_file or None,
            do_lower_case=FLAGS.do_lower_case if FLAGS.vocab_file else None,
            with_mlm=FLAGS.with_mlm)
    kwargs = dict(task=task, seq_length=FLAGS.seq_length, labels=FLAGS.labels,
                  top_k=FLAGS.top_k, max_masks=FLAGS.max_masks,
                  max_answer_length=FLAGS.max_answer_length)
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
