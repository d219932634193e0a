"""Converters between bert_tf models and other formats: one module per format, one table.

  formats      the table (FORMATS, in detection order): `read(path)`, `detect`, `read_config`;
               every entry point reads through it
  source       the protocol: `Format` (detect / read / write) and the `Source` read returns
  checkpoints  `load_checkpoint(model, path)` (through the table) and the converters' functions
  tf1          the original TF1 checkpoints (`bert/encoder/layer_0/...`): read and write
  native       our own training checkpoints (`tf.train.Checkpoint(model=...)`)
  hf           Hugging Face `model.safetensors` + `config.json`: read and write
  sentence_transformers  pooling / Normalize / max_seq_length of a sentence-transformers dir
  model_garden Model Garden TF2 checkpoints (BertEncoder/V2, BertPretrainerV2) both ways;
               model_garden_format is its format (config from bert_config.json / params.yaml)
  tfhub        TF Hub / export_tfhub_lib encoder (+mlm) and preprocessing SavedModels -> bert_tf
  keras_hub    keras-hub BERT preset directories both ways
  bert_tf_export  bert_tf's own SavedModel exports (read back; written through bert_tf.exporter)
  keras_file   `.keras` files of bert_tf models
  handoff      `--init_checkpoint` fills --bert_config_file / --vocab_file / --do_lower_case
  common       shared path resolution, shape-checked assignment and load reports
  interop      bert_tf models <-> TF1-named weight dicts for the peer converters; lazy peer imports

The peer converters import their peer (tf_keras + Model Garden, keras-hub) lazily: the library
never imports one at module level. `python -m bert_tf.convert` (`bert-convert`) converts between
the formats (see `bert_tf/convert/__main__.py`).
"""
