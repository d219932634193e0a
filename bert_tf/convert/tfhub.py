"""TF Hub BERT SavedModels (Model Garden's `export_tfhub_lib`) -> bert_tf weights + vocab.

No peer is needed, and nothing in the SavedModel runs: it is read as data
(`bert_tf.convert.saved_model_data`), through the variable names of
`official.nlp.modeling.networks.BertEncoder` (`transformer/layer_0/...`) in its `variables`
list and, when exported with `with_mlm=True`, in its `mlm` sub-model's
(`.../cls/predictions/...`). The vocab and do_lower_case come from the encoder (`vocab_file`
asset, `do_lower_case` variable) or from the matching preprocessing SavedModel.

>>> model, vocab, lower = load_tfhub_encoder("bert_en_uncased_L-2_H-128_A-2/2")  # doctest: +SKIP
"""
import os

from bert_tf import BertError
from bert_tf.convert.interop import config_from_weights, model_from_weights, weights_source
from bert_tf.convert.saved_model_data import SavedModelData
from bert_tf.convert.source import Format, saved_model_inside

_EMBEDDINGS = {
    "word_embeddings/embeddings": "bert/embeddings/word_embeddings",
    "position_embedding/embeddings": "bert/embeddings/position_embeddings",
    "type_embeddings/embeddings": "bert/embeddings/token_type_embeddings",
    "embeddings/layer_norm/gamma": "bert/embeddings/LayerNorm/gamma",
    "embeddings/layer_norm/beta": "bert/embeddings/LayerNorm/beta",
    "pooler_transform/kernel": "bert/pooler/dense/kernel",
    "pooler_transform/bias": "bert/pooler/dense/bias",
}
_BLOCK = {
    "self_attention/query": "attention/self/query",
    "self_attention/key": "attention/self/key",
    "self_attention/value": "attention/self/value",
    "self_attention/attention_output": "attention/output/dense",
    "self_attention_layer_norm": "attention/output/LayerNorm",
    "intermediate": "intermediate/dense",
    "output": "output/dense",
    "output_layer_norm": "output/LayerNorm",
}
_MLM = {
    "cls/predictions/transform/dense/kernel": "cls/predictions/transform/dense/kernel",
    "cls/predictions/transform/dense/bias": "cls/predictions/transform/dense/bias",
    "cls/predictions/transform/LayerNorm/gamma": "cls/predictions/transform/LayerNorm/gamma",
    "cls/predictions/transform/LayerNorm/beta": "cls/predictions/transform/LayerNorm/beta",
    "cls/predictions/output_bias/bias": "cls/predictions/output_bias",
}


def _tf1_name(name, num_layers_seen):
    name = name.split(":")[0]
    for theirs, ours in {**_EMBEDDINGS, **_MLM}.items():
        if name == theirs or name.endswith("/" + theirs):
            return ours
    parts = name.split("/")
    for i, part in enumerate(parts[:-1]):
        if part.startswith("layer_") and part[6:].isdigit() and i and parts[i - 1] == "transformer":
            rest = "/".join(parts[i + 1:-1])
            if rest in _BLOCK:
                num_layers_seen.add(int(part[6:]))
                return f"bert/encoder/{part}/{_BLOCK[rest]}/{parts[-1]}"
    return None


def read_tfhub_encoder(export_dir, hidden_act="gelu"):
    """Reads a TF Hub BERT encoder SavedModel into (BertConfig, TF1-named weights, vocab_file,
    do_lower_case); vocab_file / do_lower_case are None when the export does not carry them.

    Args:
        export_dir: the SavedModel directory (Model Garden's export_tfhub_lib layout).
        hidden_act: not recorded in the SavedModel; export_tfhub_lib uses the config's
            "gelu", the tanh approximation (bert_tf's "gelu").
    """
    sm = SavedModelData(export_dir)
    variables = []
    for path in (["variables"], ["mlm", "variables"]):  # what `loaded.variables` would list
        node = sm.node(path)
        if node is not None:
            variables += sm.items(node)
    weights, layers = {}, set()
    for v in variables:
        name = _tf1_name(sm.variable_name(v), layers) if sm.kind(v) == "variable" else None
        if name is not None and name not in weights:
            weights[name] = sm.value(v)
    if "bert/embeddings/word_embeddings" not in weights or not layers:
        raise BertError(f"{export_dir}: no BERT encoder variables (expected Model Garden "
                        "BertEncoder names such as transformer/layer_0/self_attention/...)")
    h = weights["bert/embeddings/word_embeddings"].shape[1]
    heads = None
    for i in range(len(layers)):
        for q in ("query", "key", "value"):
            k = f"bert/encoder/layer_{i}/attention/self/{q}/"
            if k + "kernel" not in weights:
                raise BertError(f"{export_dir}: missing {k}kernel (truncated export?)")
            heads = weights[k + "kernel"].shape[1]
            weights[k + "kernel"] = weights[k + "kernel"].reshape(h, h)
            weights[k + "bias"] = weights[k + "bias"].reshape(h)
        k = f"bert/encoder/layer_{i}/attention/output/dense/kernel"
        weights[k] = weights[k].reshape(h, h)
    cfg = config_from_weights(weights, heads, hidden_act, export_dir)
    vocab_file = do_lower_case = None
    vocab_node, lower_node = sm.node(["vocab_file"]), sm.node(["do_lower_case"])
    if vocab_node is not None and sm.kind(vocab_node) == "asset":
        vocab_file = sm.asset_path(vocab_node)
    if lower_node is not None and sm.kind(lower_node) == "variable":
        value = sm.value(lower_node)
        if value.shape != () or value.dtype != bool:
            raise BertError(f"{export_dir}: its do_lower_case variable is a {value.dtype} of "
                            f"shape {list(value.shape)}, not a bool scalar")
        do_lower_case = bool(value)
    return cfg, weights, vocab_file, do_lower_case


def load_tfhub_encoder(export_dir, bert_config=None, hidden_act="gelu"):
    """A bert_tf model from a TF Hub encoder SavedModel: (model, vocab_file, do_lower_case).

    Args:
        export_dir: the encoder SavedModel.
        bert_config: optional BertConfig; default inferred from the weights.
        hidden_act: see read_tfhub_encoder.

    The model is a BertPretrainer when the export has the `mlm` sub-model (its NSP head is
    freshly initialised: TF Hub exports carry none), else a BertEncoder. A given bert_config
    must agree with the weights' shapes.
    """
    cfg, weights, vocab_file, do_lower_case = read_tfhub_encoder(export_dir, hidden_act)
    if vocab_file is not None:
        from bert_tf import tokenization
        tokenization.check_vocab_size(vocab_file, cfg.vocab_size, export_dir)
    model = model_from_weights(bert_config or cfg, weights, source=export_dir)
    return model, vocab_file, do_lower_case


def read_tfhub_preprocessor(export_dir):
    """(vocab_file, do_lower_case) of a TF Hub BERT preprocessing SavedModel.

    The vocab is the export's one .txt asset. Lower-casing is read, never run, from the first
    of: the `do_lower_case` bert_tf's exports record in `assets.extra/bert_tf_export.json`;
    the `lower_case` of the tokenizer layer's config in `keras_metadata.pb` (tf_keras exports
    of BertTokenizer, FastWordpieceBertTokenizer, where the layer was saved with its config;
    Model Garden's export_tfhub_lib saves BertTokenizer without one); the ops the `tokenize`
    function can reach (a `CaseFoldUTF8` / `StringLower`: True; else a `FastBertNormalize`:
    undecided, its casing is a data setting; else a WordPiece tokenizer op: False; ops only
    other functions hold do not count). do_lower_case is None where none of these decides
    (also: tokenizer layers that disagree): the caller then takes the model's name or
    --do_lower_case, as for any source that records no casing.
    """
    import tensorflow as tf
    from bert_tf.convert.source import real_inside
    assets = os.path.join(export_dir, "assets")
    found = sorted(f for f in tf.io.gfile.glob(os.path.join(assets, "*.txt")))
    if len(found) != 1:
        raise BertError(f"{export_dir}: expected one vocab .txt asset in assets/, found "
                        f"{len(found)} (not a WordPiece BERT preprocessor?)")
    sm = SavedModelData(export_dir)
    tokenize = sm.node(["tokenize"])
    if tokenize is None:
        raise BertError(f"{export_dir}: no `tokenize` (not a TF Hub BERT preprocessor)")
    return real_inside(export_dir, found[0], "vocab asset"), _preprocessor_lower_case(sm,
                                                                                      tokenize)


_TOKENIZER_LAYERS = ("BertTokenizer", "FastWordpieceBertTokenizer")
_LOWER_OPS = {"CaseFoldUTF8", "StringLower"}
_NORMALIZER_OPS = {"FastBertNormalize"}  # lower-cases or not by a data setting


def _preprocessor_lower_case(sm, tokenize):
    """do_lower_case of a preprocessor, or None (see read_tfhub_preprocessor)."""
    import tensorflow as tf
    from bert_tf import fileio
    meta = os.path.join(sm.dir, "assets.extra", "bert_tf_export.json")
    if tf.io.gfile.exists(meta):
        recorded = fileio.json_bool(fileio.read_json(meta), "do_lower_case", meta)
        if recorded is not None:
            return recorded
    # Model Garden's own BertTokenizer is saved without its config ("layer was saved without
    # config"): then the ops decide
    configs = [c for c in sm.keras_layer_configs() if "lower_case" in c
               and str(c.get("class_name")).split(">")[-1] in _TOKENIZER_LAYERS]
    if configs:  # a lower_case that is no bool, or two that disagree: nothing else is trusted
        settings = {c.get("lower_case") for c in configs}
        clear = all(isinstance(c.get("lower_case"), bool) for c in configs)
        return settings.pop() if clear and len(settings) == 1 else None
    ops = sm.functions_reachable(tokenize)
    if ops & _LOWER_OPS:
        return True
    if ops & _NORMALIZER_OPS:
        return None
    return False if any(op.startswith(("Wordpiece", "FastWordpiece")) for op in ops) else None


# ---- the format (bert_tf.convert.source) -----------------------------------------------------

def _detect(path):
    return saved_model_inside(path)  # also <dir>/encoder/ and <dir>/<newest version>/


def _read(path):
    cfg, weights, vocab, lower = read_tfhub_encoder(path)
    return weights_source("tfhub", path, path, lambda: weights, bert_config=cfg,
                          vocab_file=vocab, casing=None if lower is None else (lower, lower))


# --from=tfhub reads bert_tf's own encoder export too (a TF Hub-style SavedModel).
FORMAT = Format("tfhub", _detect, _read, heads=True, also_reads=("bert_tf_export",),
                looks_for="saved_model.pb (TF Hub encoder), also under encoder/ or a numbered "
                "version folder")
