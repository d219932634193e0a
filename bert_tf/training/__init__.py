"""Training: the one loop behind run_pretraining.py and the fine-tuning scripts. It knows no
task: pre-training (bert_tf.pretraining) and the fine-tuning tasks (bert_tf.tasks) hand it a
`Task`.

  options         TrainerOptions (every field with flag() is a flag)
  task            Task: what the trainer needs from pre-training or a fine-tuning task
  trainer         the one loop: strategy, optimizer, replica step, train, eval, export
  evaluation      the trainer's eval step, loop and record (eval_results.txt, summaries)
  checkpointing   the trainer's checkpoints: save, resume, --init_checkpoint
  preemption      SIGTERM/SIGINT while training: checkpoint the step in flight, exit 75
  summaries       the trainer's TensorBoard summaries (train and eval)
  reporting       the training log line and progress bar of each loop
  optimization    the original's AdamWeightDecay (and LAMB), warm-up + linear decay
  distribute      strategy choice (TPU, Mirrored, MultiWorker, OneDevice)
  precision       where bfloat16 is fast (--mixed_precision=auto)
"""
