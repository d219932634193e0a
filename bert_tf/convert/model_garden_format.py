"""Model Garden TF2 checkpoints as a format (the converter is `bert_tf.convert.model_garden`).

The config: `bert_config.json` beside the checkpoint, else the checkpoint's shapes with what
`params.yaml`'s BERT encoder (task.model.encoder.bert) says over them; hidden_act is not
stored in checkpoints (Model Garden's default: the tanh GELU, bert_tf's "gelu").
"""
from bert_tf import BertError, fileio
from bert_tf.convert import model_garden
from bert_tf.convert.source import (Format, Source, beside, checkpoint_variables, file_in, lazy,
                                    parent, write_config_and_vocab)

_ACTIVATIONS = {"gelu": "gelu", "exact_gelu": "gelu_exact", "relu": "relu", "tanh": "tanh",
                "swish": "swish"}


def params_config(directory, inferred):
    """BertConfig from Model Garden's `params.yaml` over the one `inferred` from the
    checkpoint's shapes, or None without a params.yaml.

    Args:
        directory: the checkpoint's directory (where params.yaml is looked for).
        inferred: the BertConfig inferred from the checkpoint's shapes.
    """
    from bert_tf.modeling.config import BertConfig
    path = file_in(directory, "params.yaml")
    if path is None:
        return None
    import yaml
    try:
        params = yaml.safe_load(fileio.read_text(path))
    except yaml.YAMLError as e:
        raise BertError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    node = params if isinstance(params, dict) else {}
    for key in ("task", "model", "encoder", "bert"):
        node = node.get(key, node) if isinstance(node, dict) else node
    if not isinstance(node, dict) or "hidden_size" not in node:
        raise BertError(f"{path}: no BERT encoder config (task.model.encoder.bert)")
    if node.get("embedding_size") not in (None, node["hidden_size"]) or node.get("norm_first"):
        raise BertError(f"{path}: embedding_size / norm_first encoders are not BERT's layout")
    act = node.get("hidden_activation", "gelu")
    if act not in _ACTIVATIONS:
        raise BertError(f"{path}: hidden_activation {act!r} is not supported; expected one of "
                        f"{', '.join(_ACTIVATIONS)}")
    fields = dict(vocab_size=node.get("vocab_size"), hidden_size=node["hidden_size"],
                  num_hidden_layers=node.get("num_layers"),
                  num_attention_heads=node.get("num_attention_heads"),
                  intermediate_size=node.get("intermediate_size"),
                  hidden_act=_ACTIVATIONS[act], hidden_dropout_prob=node.get("dropout_rate"),
                  attention_probs_dropout_prob=node.get("attention_dropout_rate"),
                  max_position_embeddings=node.get("max_position_embeddings"),
                  type_vocab_size=node.get("type_vocab_size"),
                  initializer_range=node.get("initializer_range"))
    return BertConfig.from_dict({**inferred.to_dict(), **{
        k: v for k, v in fields.items() if v is not None}}, source=path)


def _detect(path):
    prefix, names = checkpoint_variables(path)
    if prefix and "_CHECKPOINTABLE_OBJECT_GRAPH" in names \
            and model_garden.is_model_garden_checkpoint(prefix):
        return prefix
    return None


def _read(prefix):
    directory = parent(prefix)
    found = beside(directory)
    read = lazy(lambda: model_garden.read_model_garden_checkpoint(prefix))
    if found["bert_config"] is None:
        found["bert_config"] = params_config(directory, read()[0]) or read()[0]

    def loader(model):
        from bert_tf.convert.tf1 import load_tf1_weights
        return load_tf1_weights(model, read()[1], prefix)
    return Source("model_garden", prefix, directory, **found, loader=loader,
                  has_mlm=lambda: "cls/predictions/output_bias" in read()[1])


def _write(net, cfg, out, vocab_file, casing):
    import tensorflow as tf
    tf.io.gfile.makedirs(out)
    model_garden.save_model_garden_checkpoint(net, f"{out.rstrip('/')}/bert_model.ckpt")
    write_config_and_vocab(out, cfg, vocab_file, casing, "model_garden")


FORMAT = Format("model_garden", _detect, _read, _write, heads=True,
                looks_for="a Model Garden checkpoint (encoder key)")
