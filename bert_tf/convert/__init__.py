"""Converters between bert_tf models and other formats (one module per foreign format).

  checkpoints  `load_checkpoint(model, path)`: detects the format, calls the module below
  tf1          the original TF1 checkpoints (`bert/encoder/layer_0/...`): read and write
  native       our own training checkpoints (`tf.train.Checkpoint(model=...)`)
  hf           Hugging Face `model.safetensors` + `config.json`: read and write
  common       shared path resolution, shape-checked assignment and load reports

`python -m bert_tf.convert --from={tf1,bert_tf,hf} --to={tf1,hf} --source=... --output=...`
converts between them (see `bert_tf/convert/__main__.py`).
"""
