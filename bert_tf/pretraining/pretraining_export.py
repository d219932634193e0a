"""What run_pretraining.py exports at the end of training (and in its separate export step).

Without --vocab_file: the ids-in encoder SavedModel in export_dir (TF Hub encoder convention).
With it, the TF Serving layout `<export_dir>/<model_name>.../<version>/`, one version number
for all four, each with warm-up requests in assets.extra/:

  <model_name>               text in -> fill-mask (top-k tokens per [MASK])
  <model_name>_embeddings    text in -> pooled_output / sequence_output
  <model_name>_preprocessor  text in -> int32 encoder inputs (TF Hub preprocessor)
  <model_name>_encoder       int32 inputs -> encoder outputs (TF Hub encoder)

Both encoder exports carry the `mlm` sub-model (masked-LM logits, as Model Garden's
`export_tfhub_lib` with_mlm=True); with --vocab_file also its `vocab_file` asset and
`do_lower_case`.
"""
import logging

import tensorflow as tf

from bert_tf import BertError

log = logging.getLogger("bert_tf")

SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[MASK]")
def check_vocab(options, bert_config):
    """One-line BertError unless --vocab_file fits the config (before any training step).

    Args:
        options: PretrainingOptions (vocab_file may be None: nothing to check).
        bert_config: the model's BertConfig.
    """
    if not options.vocab_file:
        return
    from bert_tf.tokenization import check_vocab_size
    if not tf.io.gfile.exists(options.vocab_file):
        raise BertError(f"--vocab_file={options.vocab_file}: file not found")
    tokens = check_vocab_size(options.vocab_file, bert_config.vocab_size,
                              options.bert_config_file or "the model")
    missing = [t for t in SPECIAL_TOKENS if t not in set(tokens)]
    if missing:
        raise BertError(f"--vocab_file={options.vocab_file}: no {', '.join(missing)} token "
                        "(a BERT vocab needs [CLS], [SEP] and [MASK])")


def export_pretrained(model, export_dir, options, init_source=None):
    """Export a trained BertPretrainer as described in the module docstring
    (`bert_tf.export.pretraining.export_pretrained`, reached through `bert_tf.exporter`: the
    export package is a higher layer than training).

    Args:
        model: the BertPretrainer.
        export_dir: the encoder SavedModel (no vocab) or the TF Serving base folder.
        options: PretrainingOptions (vocab_file, do_lower_case, max_seq_length, model_name).
        init_source: the `Source` the command read for init_checkpoint, or None.
    Returns:
        export_dir.
    """
    import bert_tf
    return bert_tf.exporter("pretrained")(model, export_dir, options, init_source=init_source)
