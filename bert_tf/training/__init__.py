"""Training: the loop behind run_pretraining.py and the fine-tuning scripts.

  options         TrainerOptions / PretrainingOptions (every field with flag() is a flag)
  task            Task: what the trainer needs from pre-training or a fine-tuning task
  trainer         the one loop: strategy, optimizer, replica step, train, eval, export
  checkpointing   the trainer's checkpoints: save, resume, --init_checkpoint
  summaries       the trainer's TensorBoard summaries (train and eval)
  pretraining     the pre-training task (masked LM + NSP) and run_pretraining
  phase_plan      the two-phase recipe (128 then 512) as a plan: steps, data, learning rate
  phases          running the phases on the trainer: phase record, schedule, switch, eval
  pretraining_export  run_pretraining's exports (ids-in encoder, or text-in models for serving)
  losses          fast sparse softmax cross-entropy of the pre-training step
  optimization    the original's AdamWeightDecay (and LAMB), warm-up + linear decay
  distribute      strategy choice (TPU, Mirrored, MultiWorker, OneDevice)
  input_pipeline  pre-training TFRecords -> batches (static shapes, dynamic masking)
  preflight       one-line errors for bad pre-training files before the first step
  record_checks   in-graph checks of every record read, and their one-line errors
"""
