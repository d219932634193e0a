"""Converters between bert_tf models and other formats (one module per foreign format).

  checkpoints  `load_checkpoint(model, path)`: detects the format, calls the module below
  detect       which format a path holds (shared with `bert_tf.from_pretrained`)
  cli_formats  each format's reader and writer for the command line
  tf1          the original TF1 checkpoints (`bert/encoder/layer_0/...`): read and write
  native       our own training checkpoints (`tf.train.Checkpoint(model=...)`)
  hf           Hugging Face `model.safetensors` + `config.json`: read and write
  common       shared path resolution, shape-checked assignment and load reports
  interop      bert_tf models <-> TF1-named weight dicts for the peer converters; lazy peer imports
  model_garden Model Garden TF2 checkpoints (BertEncoder/V2, BertPretrainerV2) both ways
  tfhub        TF Hub / export_tfhub_lib encoder (+mlm) and preprocessing SavedModels -> bert_tf
  keras_hub    keras-hub BERT preset directories both ways

The peer converters import their peer (tf_keras + Model Garden, keras-hub) lazily: the library
never imports one at module level.

`python -m bert_tf.convert --from={tf1,bert_tf,hf,model_garden,tfhub,keras_hub}
--to={tf1,hf,model_garden,keras_hub,savedmodel} --source=... --output=...` (`bert-convert`)
converts between them (see `bert_tf/convert/__main__.py`).
"""
