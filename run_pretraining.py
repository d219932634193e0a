"""Pre-train BERT (masked LM + next sentence) on TFRecords from create_pretraining_data.py.

The original's flags and defaults, plus the TF2 ones (--strategy, --mixed_precision, ...).
Restarting with the same --output_dir resumes from its latest checkpoint. See bert_tf.training.pretraining.

Several machines (--strategy=multi_worker): run the same command on every host, each with
TF_CONFIG naming the cluster and its own task, e.g. on the second of two hosts
  TF_CONFIG='{"cluster": {"worker": ["host1:12345", "host2:12345"]},
              "task": {"type": "worker", "index": 1}}'
--train_batch_size is the global batch; --output_dir (and --input_file) must be storage all
hosts see (gs://...). Worker 0 writes checkpoints, summaries and the export; each worker reads
its share of the input files. If a worker dies the others stop with an error; restart all of
them to resume. TPU pod slices: --use_tpu --tpu_name=<pod name>.
"""
import sys

from absl import app, flags, logging

import bert_tf
from bert_tf import BertError
from bert_tf import script_flags
from bert_tf.script_flags import define_tpu_flags

FLAGS = flags.FLAGS

# The original run_pretraining.py flags (same names and defaults).
flags.DEFINE_string("bert_config_file", None, "The config json file of the pre-trained BERT "
                    "model. This specifies the model architecture.")
flags.DEFINE_string("input_file", None, "Input TF example files (can be a glob or comma "
                    "separated).")
flags.DEFINE_string("output_dir", None, "The output directory where the model checkpoints will "
                    "be written.")
flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (usually from a pre-trained BERT "
                    "model): an original TF1 checkpoint or one of ours.")
flags.DEFINE_integer("max_seq_length", 128, "The maximum total input sequence length after "
                     "WordPiece tokenization. Must match the data file.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum number of masked LM predictions per "
                     "sequence. Must match the data file.")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
flags.DEFINE_integer("train_batch_size", 32, "Total (global) batch size for training.")
flags.DEFINE_integer("eval_batch_size", 8, "Total (global) batch size for eval.")
flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate.")
flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.")
flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warmup steps.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save the model checkpoint.")
flags.DEFINE_integer("iterations_per_loop", 1000, "How many steps to run in each call of the "
                     "compiled training loop.")
flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval steps.")
define_tpu_flags()  # the original six: --use_tpu ... --num_tpu_cores
flags.adopt_module_key_flags(script_flags)  # ... listed in --help too

# TF2 additions.
flags.DEFINE_string("strategy", None, "one_device | mirrored | multi_worker | tpu | auto "
                    "(default: tpu with --use_tpu, else auto = mirrored on several GPUs).")
flags.DEFINE_string("mixed_precision", "none", "none | float16 (with loss scaling) | bfloat16.")
flags.DEFINE_bool("jit_compile", False, "XLA-compile the forward/backward pass.")
flags.DEFINE_string("optimizer", "adamw_original", "adamw_original (the original "
                    "AdamWeightDecay) | adamw | lamb.")
flags.DEFINE_float("weight_decay_rate", 0.01, "Decoupled weight decay (not on LayerNorm/bias).")
flags.DEFINE_integer("grad_accum_steps", 1, "Split each per-replica batch into this many "
                     "micro-batches and accumulate their gradients (one update per step).")
flags.DEFINE_bool("dynamic_masking", False, "Re-mask every example each time it is read "
                  "(RoBERTa style) instead of using the records' fixed masks.")
flags.DEFINE_integer("mask_id", 103, "Id of [MASK] for --dynamic_masking (103 in Google's "
                     "released vocabularies).")
flags.DEFINE_string("export_dir", None, "Where to export the encoder SavedModel after training "
                    "(default: <output_dir>/export). Without --do_train/--do_eval: only export "
                    "the latest checkpoint in --output_dir there.")
flags.DEFINE_integer("seed", None, "Random seed (weights, data order, masks); default: random, "
                     "kept in the checkpoint so a resumed run sees the same data stream.")


def main(argv):
    del argv
    try:
        from bert_tf.training import distribute
        from bert_tf.training import pretraining as training
        if FLAGS.use_tpu and FLAGS.strategy not in (None, "tpu"):
            raise BertError(f"--use_tpu: conflicts with --strategy={FLAGS.strategy}")
        if not FLAGS.bert_config_file:
            raise BertError("--bert_config_file: required")
        strategy_name = "tpu" if FLAGS.use_tpu else (FLAGS.strategy or "auto")
        distribute.set_mixed_precision(FLAGS.mixed_precision)
        strategy = distribute.get_strategy(strategy_name, FLAGS.tpu_name or FLAGS.master,
                                           FLAGS.tpu_zone, FLAGS.gcp_project)
        if strategy_name == "tpu" and strategy.num_replicas_in_sync != FLAGS.num_tpu_cores:
            logging.warning("--num_tpu_cores=%d but the TPU has %d cores; using %d",
                            FLAGS.num_tpu_cores, strategy.num_replicas_in_sync,
                            strategy.num_replicas_in_sync)
        options = training.PretrainingOptions(
            max_seq_length=FLAGS.max_seq_length,
            max_predictions_per_seq=FLAGS.max_predictions_per_seq,
            train_batch_size=FLAGS.train_batch_size, eval_batch_size=FLAGS.eval_batch_size,
            learning_rate=FLAGS.learning_rate, num_train_steps=FLAGS.num_train_steps,
            num_warmup_steps=FLAGS.num_warmup_steps,
            save_checkpoints_steps=FLAGS.save_checkpoints_steps,
            iterations_per_loop=FLAGS.iterations_per_loop, max_eval_steps=FLAGS.max_eval_steps,
            optimizer=FLAGS.optimizer, weight_decay_rate=FLAGS.weight_decay_rate,
            grad_accum_steps=FLAGS.grad_accum_steps, jit_compile=FLAGS.jit_compile,
            dynamic_masking=FLAGS.dynamic_masking, mask_id=FLAGS.mask_id, seed=FLAGS.seed,
            init_checkpoint=FLAGS.init_checkpoint)
        result = training.run_pretraining(
            FLAGS.bert_config_file, FLAGS.input_file, FLAGS.output_dir, do_train=FLAGS.do_train,
            do_eval=FLAGS.do_eval, export_dir=FLAGS.export_dir, strategy=strategy,
            options=options)
    except BertError as e:
        sys.exit(f"error: {e}")
    if result["eval"]:
        for key in training.EVAL_KEYS:
            print(f"{key} = {result['eval'][key]}")
    if result["export_dir"]:
        print(f"exported the encoder to {result['export_dir']}")


if __name__ == "__main__":
    logging.set_verbosity(logging.INFO)
    app.run(main)
