"""Training: the loop behind run_pretraining.py and the fine-tuning scripts.

  pretraining     pre-training runner (losses, eval, checkpoints, export at the end)
  optimization    the original's AdamWeightDecay (and LAMB), warm-up + linear decay
  distribute      strategy choice (TPU, Mirrored, MultiWorker, OneDevice)
  input_pipeline  pre-training TFRecords -> batches (static shapes, dynamic masking)
"""
