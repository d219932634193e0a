"""Pre-training (masked LM + next sentence prediction): a Task of the one trainer
(bert_tf.training) and run_pretraining.py.

  options         PretrainingOptions: run_pretraining's flags (TrainerOptions + the task's)
  pretraining     the pre-training task and run_pretraining
  losses          fast sparse softmax cross-entropy of the pre-training step
  phase_plan      the two-phase recipe (128 then 512) as a plan: steps, data, learning rate
  phases          running the phases on the trainer: phase record, schedule, switch, eval
  input_pipeline  pre-training TFRecords -> batches (static shapes, dynamic masking)
  packed_records  training on sequence-packed rows (bert-pack-pretraining-data's records)
  tfrecord_reader  TFRecords read without starting TensorFlow, and their framing errors
  preflight       one-line errors for bad pre-training files before the first step
  preflight_line  what the pre-flight line says (the packer's journal, or the sample)
  preflight_run   bert-run-pretraining's pre-flight of every phase, before TensorFlow starts
  record_checks   in-graph checks of every record read, and their one-line errors
  pretraining_export  run_pretraining's exports (ids-in encoder, or text-in models for serving)
"""
