"""Model Garden (tf-models-official) TF2 BERT checkpoints <-> bert_tf.

Reading needs no peer: a checkpoint is walked through its object graph (the layout of
`official.nlp.modeling.networks.BertEncoder` and of `BertPretrainerV2`'s `masked_lm` /
`next_sentence` heads). Writing builds the Model Garden objects themselves (tf_keras),
imported lazily. TF Hub SavedModels: bert_tf.convert.tfhub.

Weights travel as TF1-named dicts (bert_tf.convert.interop).

>>> cfg, weights = read_model_garden_checkpoint("mg/ckpt-1")        # doctest: +SKIP
>>> model = model_from_weights(cfg, weights)                       # doctest: +SKIP
>>> save_model_garden_checkpoint(model, "out/bert_model.ckpt")     # doctest: +SKIP
"""
import os
import uuid

import numpy as np

from bert_tf import BertError
from bert_tf.convert.interop import (  # noqa: F401  (re-exported for convenience)
    build_bert_model, config_from_weights, encoder_of, get_weights, model_from_weights,
    require_peer, set_weights)

# ---- Model Garden checkpoints ----------------------------------------------------------------


class _ObjectGraph:
    """Child-name lookups in a TF2 object-based checkpoint (aliases resolve naturally)."""

    def __init__(self, prefix):
        import tensorflow as tf
        from tensorflow.core.protobuf import trackable_object_graph_pb2
        try:
            self.reader = tf.train.load_checkpoint(prefix)
            raw = self.reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH")
        except (tf.errors.OpError, ValueError, IndexError, RuntimeError) as e:
            raise BertError(f"{prefix}: not a readable TF2 checkpoint (truncated or missing "
                            f".data file? {str(e).splitlines()[0][:200]})") from None
        self.prefix = prefix
        self.graph = trackable_object_graph_pb2.TrackableObjectGraph()
        self.graph.ParseFromString(raw)

    def node(self, path, start=0):
        node_id = start
        parts = path if isinstance(path, list) else [p for p in path.split("/") if p]
        for part in parts:
            children = {c.local_name: c.node_id for c in self.graph.nodes[node_id].children}
            if part not in children:
                return None
            node_id = children[part]
        return node_id

    def children(self, node_id):
        return [c.local_name for c in self.graph.nodes[node_id].children]

    def value(self, node_id, path):
        nid = self.node(path, node_id)
        if nid is None:
            return None
        for attr in self.graph.nodes[nid].attributes:
            if attr.name == "VARIABLE_VALUE":
                import tensorflow as tf
                try:
                    return self.reader.get_tensor(attr.checkpoint_key)
                except (tf.errors.OpError, ValueError, IndexError, RuntimeError) as e:
                    raise BertError(f"{self.prefix}: cannot read {attr.checkpoint_key} "
                                    f"(truncated or missing .data file? "
                                    f"{str(e).splitlines()[0][:160]})") from None
        return None

    def require(self, node_id, path, what):
        value = self.value(node_id, path)
        if value is None:
            raise BertError(f"{self.prefix}: no {what} at {path!r} (not a Model Garden "
                            "BertEncoder checkpoint, or truncated)")
        return value


def _resolve_prefix(path):
    import tensorflow as tf
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise BertError(f"{path}: directory holds no checkpoint")
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise BertError(f"{path}: no checkpoint ({path}.index not found)")
    return path


def is_model_garden_checkpoint(path):
    """True if `path` (prefix or directory) is a Model Garden BERT checkpoint: a BertEncoder /
    BertEncoderV2 under `encoder` (BertPretrainerV2.checkpoint_items too), `model/encoder_network`
    (Checkpoint(model=BertPretrainerV2)) or the legacy root `model`.

    Args:
        path: checkpoint prefix or directory.
    """
    try:
        g = _ObjectGraph(_resolve_prefix(path))
    except BertError:
        return False
    for where in ("encoder", "model/encoder_network", "model"):
        node = g.node(where)
        if node is not None and (g.node("_transformer_layers", node) is not None or
                                 g.node("layer_with_weights-0/embeddings", node) is not None):
            return True
    return False


def _encoder_layout(graph, enc_id):
    """Paths of the embedding tables, embedding LayerNorm, blocks and pooler inside the encoder.

    BertEncoder (functional model): layer_with_weights-{0..3} hold the word / position / type
    tables and the LayerNorm, then one per block, then the pooler. BertEncoderV2 (a layer,
    encoder type "bert_v2"): named attributes.
    """
    if graph.node("_transformer_layers", enc_id) is not None:
        blocks = [f"_transformer_layers/{name}" for name in sorted(
            graph.children(graph.node("_transformer_layers", enc_id)), key=int)]
        return ("_embedding_layer/embeddings", "_position_embedding_layer/embeddings",
                "_type_embedding_layer/embeddings", "_embedding_norm_layer", blocks,
                "_pooler_layer")
    blocks = []
    k = 4
    while graph.node(f"layer_with_weights-{k}/_attention_layer", enc_id) is not None:
        blocks.append(f"layer_with_weights-{k}")
        k += 1
    return ("layer_with_weights-0/embeddings", "layer_with_weights-1/embeddings",
            "layer_with_weights-2/embeddings", "layer_with_weights-3", blocks,
            f"layer_with_weights-{k}")


def read_model_garden_checkpoint(path, hidden_act="gelu", copy_pooler_dense_to_encoder=False):
    """Reads a Model Garden TF2 BERT checkpoint into (BertConfig, TF1-named weights).

    Args:
        path: checkpoint prefix (or a directory: its latest checkpoint) written from
            `tf.train.Checkpoint(encoder=BertEncoder)` (released TF2 BERT checkpoints;
            BertEncoderV2 too; the
            legacy root name `model` works too) or from `BertPretrainerV2.checkpoint_items`
            (adds the `masked_lm` head and, if present, the `next_sentence` head).
        hidden_act: not stored in checkpoints; Model Garden's BertEncoder default is the tanh
            GELU, bert_tf's "gelu". Use "gelu_exact" for an encoder built with exact GELU.
        copy_pooler_dense_to_encoder: take the pooler from `next_sentence.pooler_dense`
            (Model Garden's export flag of the same name); by default the encoder's own
            pooler is kept and the NSP head's pooler is dropped.
    """
    prefix = _resolve_prefix(path)
    g = _ObjectGraph(prefix)
    # Layouts: Checkpoint(encoder=BertEncoder) (released; legacy root `model`),
    # Checkpoint(**BertPretrainerV2.checkpoint_items) (encoder, masked_lm,
    # next_sentence.pooler_dense) and Checkpoint(model=BertPretrainerV2) (training runs).
    enc_id, mlm, nsp_pooler, nsp_out = g.node("encoder"), g.node("masked_lm"), None, None
    if g.node("next_sentence.pooler_dense") is not None:
        nsp_pooler = "next_sentence.pooler_dense"
    full = g.node("model/encoder_network")
    if enc_id is None and full is not None:
        enc_id, mlm = full, g.node("model/masked_lm")
    heads = g.node("model/classification_heads")
    for name in g.children(heads) if heads is not None else []:
        head = f"model/classification_heads/{name}"
        kernel = g.value(0, head + "/out_proj/kernel")
        if kernel is not None and kernel.shape[-1] == 2 and nsp_out is None:
            nsp_pooler, nsp_out = head + "/dense", head + "/out_proj"
    if enc_id is None:
        enc_id = g.node("model")
    if enc_id is None:
        raise BertError(f"{prefix}: no 'encoder' object (not a Model Garden BERT checkpoint; "
                        f"top-level objects: {', '.join(g.children(0))})")
    word_path, pos_path, type_path, norm, blocks, pooler = _encoder_layout(g, enc_id)
    if not blocks:
        raise BertError(f"{prefix}: the encoder has no transformer blocks in Model Garden's "
                        "BertEncoder layout")
    w = {}
    word = g.value(enc_id, word_path)
    if word is None:  # BertPretrainerV2 saves the tied table under masked_lm only
        word = g.value(0, "masked_lm/embedding_table")
    if word is None:
        raise BertError(f"{prefix}: no word embeddings found")
    h = int(word.shape[1])
    w["bert/embeddings/word_embeddings"] = word
    w["bert/embeddings/position_embeddings"] = g.require(
        enc_id, pos_path, "position embeddings")
    w["bert/embeddings/token_type_embeddings"] = g.require(
        enc_id, type_path, "type embeddings")
    for p in ("gamma", "beta"):
        w[f"bert/embeddings/LayerNorm/{p}"] = g.require(enc_id, f"{norm}/{p}",
                                                        "embedding LayerNorm")
    heads = None
    for i, block in enumerate(blocks):
        t = f"bert/encoder/layer_{i}/"
        for ours, theirs in (("query", "_query_dense"), ("key", "_key_dense"),
                             ("value", "_value_dense")):
            kernel = g.require(enc_id, f"{block}/_attention_layer/{theirs}/kernel", "attention")
            heads = int(kernel.shape[1])  # [H, heads, head_size]
            w[t + f"attention/self/{ours}/kernel"] = kernel.reshape(h, h)
            w[t + f"attention/self/{ours}/bias"] = g.require(
                enc_id, f"{block}/_attention_layer/{theirs}/bias", "attention").reshape(h)
        w[t + "attention/output/dense/kernel"] = g.require(
            enc_id, f"{block}/_attention_layer/_output_dense/kernel", "attention").reshape(h, h)
        w[t + "attention/output/dense/bias"] = g.require(
            enc_id, f"{block}/_attention_layer/_output_dense/bias", "attention")
        for ours, theirs in (("attention/output/LayerNorm", "_attention_layer_norm"),
                             ("output/LayerNorm", "_output_layer_norm")):
            for p in ("gamma", "beta"):
                w[t + f"{ours}/{p}"] = g.require(enc_id, f"{block}/{theirs}/{p}", "LayerNorm")
        for ours, theirs in (("intermediate/dense", "_intermediate_dense"),
                             ("output/dense", "_output_dense")):
            for p in ("kernel", "bias"):
                w[t + f"{ours}/{p}"] = g.require(enc_id, f"{block}/{theirs}/{p}", "dense")
    for p in ("kernel", "bias"):
        w[f"bert/pooler/dense/{p}"] = g.require(enc_id, f"{pooler}/{p}", "pooler")
    if mlm is not None:
        w["cls/predictions/transform/dense/kernel"] = g.require(mlm, "dense/kernel", "MLM")
        w["cls/predictions/transform/dense/bias"] = g.require(mlm, "dense/bias", "MLM")
        w["cls/predictions/transform/LayerNorm/gamma"] = g.require(mlm, "layer_norm/gamma", "MLM")
        w["cls/predictions/transform/LayerNorm/beta"] = g.require(mlm, "layer_norm/beta", "MLM")
        bias = g.value(mlm, ["output_bias/bias"])  # one child named with a slash
        w["cls/predictions/output_bias"] = (bias if bias is not None else
                                            g.require(mlm, "output_bias", "MLM output bias"))
    if nsp_out is not None:
        w["cls/seq_relationship/output_weights"] = g.require(0, nsp_out + "/kernel", "NSP").T
        w["cls/seq_relationship/output_bias"] = g.require(0, nsp_out + "/bias", "NSP")
    if copy_pooler_dense_to_encoder:
        if nsp_pooler is None:
            raise BertError(f"{prefix}: copy_pooler_dense_to_encoder: the checkpoint has no "
                            "next_sentence head")
        w["bert/pooler/dense/kernel"] = g.require(0, nsp_pooler + "/kernel", "NSP pooler")
        w["bert/pooler/dense/bias"] = g.require(0, nsp_pooler + "/bias", "NSP pooler")
    cfg = config_from_weights(w, heads, hidden_act, prefix)
    return cfg, w


def load_model_garden_checkpoint(path, bert_config=None, **kwargs):
    """A new bert_tf model from a Model Garden checkpoint.

    Args:
        path: checkpoint prefix or directory (see read_model_garden_checkpoint).
        bert_config: optional BertConfig; must agree with the checkpoint's shapes (BertError
            naming the first tensor that does not). Default: inferred from the checkpoint.
        **kwargs: hidden_act, copy_pooler_dense_to_encoder (see read_model_garden_checkpoint).
    Returns: a BertPretrainer if the checkpoint has the MLM head, else a BertEncoder.
    """
    cfg, weights = read_model_garden_checkpoint(path, **kwargs)
    return model_from_weights(bert_config or cfg, weights, source=path)


def _activation_for_mg(hidden_act, tf_keras):
    if hidden_act in ("gelu", "gelu_new"):
        return lambda x: tf_keras.activations.gelu(x, approximate=True)
    if hidden_act == "gelu_exact":
        return lambda x: tf_keras.activations.gelu(x, approximate=False)
    return hidden_act


def model_garden_encoder(bert_config):
    """An `official.nlp.modeling.networks.BertEncoder` (tf_keras) for bert_config, dict outputs.

    Needs tf-models-official and tf_keras (imported here, never at module level).
    """
    tf_keras = require_peer("tf_keras", "model-garden")
    networks = require_peer("official.nlp.modeling.networks", "model-garden")
    c = bert_config
    return networks.BertEncoder(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads, intermediate_size=c.intermediate_size,
        activation=_activation_for_mg(c.hidden_act, tf_keras),
        dropout_rate=c.hidden_dropout_prob, attention_dropout_rate=c.attention_probs_dropout_prob,
        max_sequence_length=c.max_position_embeddings, type_vocab_size=c.type_vocab_size,
        initializer=tf_keras.initializers.TruncatedNormal(stddev=c.initializer_range),
        dict_outputs=True)


def _set_mg_encoder(encoder, w, cfg):
    h, n = cfg.hidden_size, cfg.num_attention_heads
    d = h // n
    by_name = {v.name.split(":")[0]: v for v in encoder.weights}

    def put(name, value):
        var = by_name[name]
        var.assign(np.asarray(value).reshape(var.shape))

    put("word_embeddings/embeddings", w["bert/embeddings/word_embeddings"])
    put("position_embedding/embeddings", w["bert/embeddings/position_embeddings"])
    put("type_embeddings/embeddings", w["bert/embeddings/token_type_embeddings"])
    put("embeddings/layer_norm/gamma", w["bert/embeddings/LayerNorm/gamma"])
    put("embeddings/layer_norm/beta", w["bert/embeddings/LayerNorm/beta"])
    for i in range(cfg.num_hidden_layers):
        t, m = f"bert/encoder/layer_{i}/", f"transformer/layer_{i}/"
        for q in ("query", "key", "value"):
            put(m + f"self_attention/{q}/kernel", w[t + f"attention/self/{q}/kernel"])
            put(m + f"self_attention/{q}/bias", w[t + f"attention/self/{q}/bias"])
        put(m + "self_attention/attention_output/kernel",
            w[t + "attention/output/dense/kernel"].reshape(n, d, h))
        put(m + "self_attention/attention_output/bias", w[t + "attention/output/dense/bias"])
        for ours, theirs in (("attention/output/LayerNorm", "self_attention_layer_norm"),
                             ("output/LayerNorm", "output_layer_norm")):
            put(m + f"{theirs}/gamma", w[t + f"{ours}/gamma"])
            put(m + f"{theirs}/beta", w[t + f"{ours}/beta"])
        for ours, theirs in (("intermediate/dense", "intermediate"), ("output/dense", "output")):
            put(m + f"{theirs}/kernel", w[t + f"{ours}/kernel"])
            put(m + f"{theirs}/bias", w[t + f"{ours}/bias"])
    put("pooler_transform/kernel", w["bert/pooler/dense/kernel"])
    put("pooler_transform/bias", w["bert/pooler/dense/bias"])


def to_model_garden(model):
    """The Model Garden objects holding a bert_tf model's weights: (checkpoint items dict,
    encoder). A BertPretrainer gives BertPretrainerV2's items (`encoder`, `masked_lm`,
    `next_sentence` whose pooler_dense copies the encoder's pooler); an encoder gives
    {"encoder": BertEncoder}."""
    import tensorflow as tf
    cfg = encoder_of(model).bert_config
    w = get_weights(model)
    encoder = model_garden_encoder(cfg)
    _set_mg_encoder(encoder, w, cfg)
    if "cls/predictions/output_bias" not in w:
        return {"encoder": encoder}, encoder
    tf_keras = require_peer("tf_keras", "model-garden")
    mg_models = require_peer("official.nlp.modeling.models", "model-garden")
    mg_layers = require_peer("official.nlp.modeling.layers", "model-garden")
    nsp = mg_layers.ClassificationHead(inner_dim=cfg.hidden_size, num_classes=2,
                                       name="next_sentence")
    pretrainer = mg_models.BertPretrainerV2(
        encoder_network=encoder, mlm_activation=_activation_for_mg(cfg.hidden_act, tf_keras),
        classification_heads=[nsp])
    ids = tf.ones((1, 4), tf.int32)
    pretrainer(dict(input_word_ids=ids, input_mask=ids, input_type_ids=tf.zeros_like(ids),
                    masked_lm_positions=tf.zeros((1, 1), tf.int32)))
    mlm = pretrainer.masked_lm
    mlm.dense.kernel.assign(w["cls/predictions/transform/dense/kernel"])
    mlm.dense.bias.assign(w["cls/predictions/transform/dense/bias"])
    mlm.layer_norm.gamma.assign(w["cls/predictions/transform/LayerNorm/gamma"])
    mlm.layer_norm.beta.assign(w["cls/predictions/transform/LayerNorm/beta"])
    mlm.bias.assign(w["cls/predictions/output_bias"])
    nsp.dense.kernel.assign(w["bert/pooler/dense/kernel"])
    nsp.dense.bias.assign(w["bert/pooler/dense/bias"])
    nsp.out_proj.kernel.assign(w["cls/seq_relationship/output_weights"].T)
    nsp.out_proj.bias.assign(w["cls/seq_relationship/output_bias"])
    # `_pretrainer`: the whole model, for the Checkpoint(model=...) layout of training runs.
    return dict(pretrainer.checkpoint_items, _pretrainer=pretrainer), encoder


def save_model_garden_checkpoint(model, prefix):
    """Writes a checkpoint Model Garden restores at `prefix` (.index + .data-*).

    Args:
        model: a BertEncoder or a bert_tf model (a BertPretrainer adds the MLM / NSP heads).
        prefix: checkpoint prefix, e.g. "out/bert_model.ckpt".

    An encoder is saved as `tf.train.Checkpoint(encoder=BertEncoder)`. A BertPretrainer is
    saved so that both `Checkpoint(**BertPretrainerV2.checkpoint_items)` (export_tfhub_lib)
    and `Checkpoint(model=BertPretrainerV2)` (training runs, which include the NSP output
    layer) restore it; the NSP head's pooler is the encoder's.

    The files are written under a temporary prefix and renamed, the .index last, so a
    reader never sees a partial checkpoint. Returns prefix.
    """
    import tensorflow as tf
    items = dict(to_model_garden(model)[0])
    if "_pretrainer" in items:
        items["model"] = items.pop("_pretrainer")
    parent = os.path.dirname(prefix)
    if parent:
        tf.io.gfile.makedirs(parent)
    tmp = f"{prefix}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    ckpt = tf.train.Checkpoint(**items)
    # Restorers check assert_existing_objects_matched(), which includes their save_counter.
    ckpt.save_counter.assign_add(1)
    written = ckpt.write(tmp)
    try:
        files = sorted(tf.io.gfile.glob(written + ".*"), key=lambda f: f.endswith(".index"))
        for f in files:
            tf.io.gfile.rename(f, prefix + f[len(written):], overwrite=True)
    finally:
        for f in tf.io.gfile.glob(tmp + ".*"):
            tf.io.gfile.remove(f)
    return prefix
