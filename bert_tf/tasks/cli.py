"""Flags the fine-tuning scripts share (beyond each script's original ones) and their main().

Scripts define their original flags themselves, call `define_tpu_flags()` /
`define_tf2_flags()`, and end with `run_script(run, ConfigClass, report)`: absl's app.run with
flag errors (unknown flag, bad value) and BertErrors as one `error: ...` line, exit status 1.
"""
import sys

from bert_tf import BertError
from bert_tf.script_flags import define_tpu_flags  # noqa: F401  (the scripts call it from here)


def define_schedule_flags():
    """The original fine-tuning scripts' training-schedule flags (same names/defaults)."""
    from absl import flags
    flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.")
    flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predictions.")
    flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")
    flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
    flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training to perform linear "
                       "learning rate warmup for. E.g., 0.1 = 10% of training.")
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save the model checkpoint.")
    flags.DEFINE_integer("iterations_per_loop", 1000, "How many steps to make in each "
                         "tf.function call (capped at 50 so progress stays visible).")


def define_tf2_flags(training=True):
    """TF2 additions: strategy, mixed precision, optimizer, seed, export."""
    from absl import flags
    flags.DEFINE_string("strategy", None, "one_device | mirrored | multi_worker | tpu | auto "
                        "(default: tpu with --use_tpu, else auto = mirrored on several GPUs).")
    flags.DEFINE_string("mixed_precision", "none", "none | float16 (with loss scaling) | "
                        "bfloat16.")
    if not training:
        return
    flags.DEFINE_string("optimizer", "adamw_original", "adamw_original (the original "
                        "AdamWeightDecay) | adamw | lamb.")
    flags.DEFINE_float("weight_decay_rate", 0.01, "Decoupled weight decay (not on "
                       "LayerNorm/bias).")
    flags.DEFINE_integer("num_train_steps", None, "Train exactly this many steps (default: "
                         "num_train_epochs over the training set).")
    flags.DEFINE_integer("seed", None, "Random seed (weights of the new head, dropout, data "
                         "order).")
    flags.DEFINE_bool("do_export", True, "After training, export an end-to-end text-in "
                      "SavedModel.")
    flags.DEFINE_string("export_dir", None, "Where to export (default: <output_dir>/export).")
    flags.DEFINE_bool("progress", True, "Show progress bars.")


def parse_flags(argv):
    """absl flag parsing; a bad flag exits with one line instead of absl's usage text."""
    from absl import flags
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        sys.exit(f"error: {e}")


def run_script(run, config_cls, report=None):
    """The scripts' `if __name__ == "__main__"` body."""
    from absl import app, logging
    logging.set_verbosity(logging.INFO)
    app.run(main_for(run, config_cls, report), flags_parser=parse_flags)


def main_for(run, config_cls, report=None):
    """An absl main: flags -> config_cls -> run(); BertError -> one-line exit."""
    def main(argv):
        if len(argv) > 1:
            sys.exit(f"error: unexpected arguments {' '.join(argv[1:])}")
        from absl import flags
        from bert_tf.tasks import finetune
        try:
            result = run(finetune.config_from(flags.FLAGS, config_cls))
        except BertError as e:
            sys.exit(f"error: {e}")
        if report is not None:
            report(result)
    return main


def print_eval(result):
    for key, value in sorted((result.get("eval") or {}).items()):
        print(f"{key} = {value}")
    if result.get("export_dir"):
        print(f"exported to {result['export_dir']}")
