"""SavedModel exports for Keras and stock TF Serving (guide: `python -m bert_tf.resources serving`).

  export_preprocessor  strings -> int32 encoder inputs (TF Hub preprocessor convention, with
                       tokenize, tokenize_with_offsets, get_special_tokens_dict)
  export_encoder       int32 inputs -> pooled/sequence/per-layer outputs (TF Hub encoder, with
                       the `mlm` sub-model, vocab_file asset and do_lower_case)
  export_end_to_end    raw text -> task outputs, plus `predict_ids` for pre-tokenized input
  export_for_serving   export/<model_name>/<version>/ with warm-up requests, atomically
  load_as_keras_layer  an export as a keras.layers.TFSMLayer
"""
from bert_tf.export.preprocessor import export_preprocessor  # noqa: F401
from bert_tf.export.encoder import export_encoder  # noqa: F401
from bert_tf.export.end_to_end import TASKS, export_end_to_end  # noqa: F401
from bert_tf.export.serving import (export_for_serving, models_config_text,  # noqa: F401
                                    next_version, write_models_config)
from bert_tf.export.keras_loading import load_as_keras_layer, load_as_keras_model  # noqa: F401


def _register():
    """The writers lower layers reach through `bert_tf.exporter` (see bert_tf/__init__)."""
    import bert_tf
    from bert_tf.export import keras_export, pretraining
    for name, fn in (("model", keras_export.export_model), ("encoder", export_encoder),
                     ("preprocessor", export_preprocessor),
                     ("pretrained", pretraining.export_pretrained)):
        bert_tf.register_exporter(name, fn)


_register()
