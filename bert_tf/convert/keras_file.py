"""A `.keras` file of any bert_tf model (`model.save`) as a format: the encoder's config, its
heads' weights too; a BertTextModel's preprocessing layer gives the vocab (the temp file it
wrote) and casing. `Source.model` is the whole loaded model (bert-export-savedmodel exports
it with its own task)."""
import tensorflow as tf

from bert_tf import BertError
from bert_tf.convert.source import Format, Source, parent


def _detect(path):
    if not path.endswith(".keras") or tf.io.gfile.isdir(path):
        return None
    return path  # a missing file is read's one-line error, not another format's


def _read(path):
    import keras
    from bert_tf.convert.interop import encoder_of, get_weights
    from bert_tf.fileio import error_gist
    if not tf.io.gfile.exists(path):
        raise BertError(f"{path}: file not found")
    try:
        # safe mode: no Lambda or pickled code runs, only registered classes are built
        model = keras.saving.load_model(path, compile=False, safe_mode=True)
    except Exception as e:  # Keras raises many types for a bad file
        raise BertError(f"{path}: cannot load this .keras file ({error_gist(e)})") from None
    pre = getattr(model, "preprocessor", None)
    inner = getattr(model, "model", model) if pre is not None else model
    try:
        cfg = encoder_of(inner).bert_config
    except BertError:
        raise BertError(f"{path}: a .keras file without a bert_tf BertEncoder "
                        f"({type(model).__name__})") from None
    vocab = casing = None
    if pre is not None and hasattr(pre, "tokenizer"):
        vocab, casing = pre.tokenizer.vocab_file, (bool(pre.do_lower_case),
                                                  bool(pre.strip_accents))
    weights = get_weights(inner)

    def loader(target):
        from bert_tf.convert.tf1 import load_tf1_weights
        return load_tf1_weights(target, weights, path)
    return Source("keras", path, parent(path), cfg, vocab, casing, loader=loader,
                  has_mlm=lambda: "cls/predictions/output_bias" in weights, model=model)


FORMAT = Format("keras", _detect, _read, looks_for="a .keras file of a bert_tf model")
