"""Our own checkpoints: what `tf.train.Checkpoint(model=model, ...)` writes during training.

The saved object tree is structured: `model` -> `encoder`, `masked_lm`, `next_sentence`,
`classifier`, ... (the task models' attribute names), with `optimizer`, `step` etc. beside
it (ignored here). An encoder saved on its own (`tf.train.Checkpoint(model=encoder)`) and
Model Garden's key (`tf.train.Checkpoint(encoder=encoder)`) load too.

Loading one part uses nested `tf.train.Checkpoint` objects mirroring that tree (e.g.
`Checkpoint(model=Checkpoint(encoder=...))` to put a pre-training encoder into a classifier)
and `expect_partial()`. Values are first restored into shape-less staging variables, so every
shape is checked (one-line error naming the variable) before the model is touched.
"""
import collections
import re

import keras
import tensorflow as tf

from bert_tf import BertError
from bert_tf.convert import common
from bert_tf.convert.source import Format, Source, beside, checkpoint_variables, parent
from bert_tf.convert.tf1 import tf1_name_map
from bert_tf.modeling.models import BertTaskModel, ensure_built, find_encoder


def _variable_paths(root):
    """{id(variable): tuple of attribute names from `root`} (shortest paths, as TF saves)."""
    view = tf.train.TrackableView(root)
    paths, seen = {}, {id(root)}
    queue = collections.deque([(root, ())])
    while queue:
        obj, prefix = queue.popleft()
        for name, child in view.children(obj).items():
            if id(child) in seen:
                continue
            seen.add(id(child))
            if isinstance(child, (keras.Variable, tf.Variable)):
                paths[id(child)] = prefix + (name,)
            else:
                queue.append((child, prefix + (name,)))
    return paths


def _tree(leaves):
    """Nested tf.train.Checkpoint objects from {path tuple: trackable}."""
    nested = {}
    for path, leaf in leaves.items():
        node = nested
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = leaf

    def build(node):
        return tf.train.Checkpoint(**{k: build(v) if isinstance(v, dict) else v
                                      for k, v in node.items()})
    return build(nested)


def _staging():
    # Unknown shape: restore accepts any shape, which we then check ourselves.
    return tf.Variable(tf.zeros([0]), shape=tf.TensorShape(None), trainable=False)


def _encoder_location(view, prefix, required=True):
    root = view.children(0)
    has_embeddings = lambda node: "embeddings" in view.children(node)
    model = root.get("model")
    if model is not None:
        inner = view.children(model).get("encoder")
        if inner is not None and has_embeddings(inner):
            return ("model", "encoder")
        if has_embeddings(model):
            return ("model",)
    if "encoder" in root and has_embeddings(root["encoder"]):
        return ("encoder",)
    if not required:
        return None
    raise BertError(f"{prefix}: no BERT encoder under the object key 'model' (not written by "
                    f"tf.train.Checkpoint(model=...)?)")


def _node(view, path):
    node = 0
    for name in path:
        node = view.children(node).get(name)
        if node is None:
            return None
    return node


def _leaves(view, node, path):
    """{node id: path} of the objects without children under `node` (variables, empty layers)."""
    found, seen = {}, {node}
    queue = collections.deque([(node, path)])
    while queue:
        node, path = queue.popleft()
        children = view.children(node)
        if not children:
            found[node] = path
        for name, child in children.items():
            if child not in seen:
                seen.add(child)
                queue.append((child, path + (name,)))
    return found


def is_object_checkpoint(prefix):
    """True if the checkpoint at `prefix` was written by tf.train.Checkpoint (object-based)."""
    try:
        return "_CHECKPOINTABLE_OBJECT_GRAPH" in dict(tf.train.list_variables(prefix))
    except (tf.errors.OpError, ValueError):
        return False


def is_bert_tf_checkpoint(prefix):
    """True if `prefix` holds a bert_tf encoder under our object keys (`model`,
    `model/encoder`, or `encoder` holding our layout; not Model Garden's `encoder`).

    Args:
        prefix: checkpoint prefix.
    """
    if not is_object_checkpoint(prefix):
        return False
    return _encoder_location(tf.train.CheckpointView(prefix), prefix, required=False) is not None


def load_bert_tf_checkpoint(model, path):
    """Loads one of our training checkpoints (or Model Garden's `encoder` key) into `model`.

    A pre-training checkpoint loads into a fine-tuning model (its encoder; the other heads are
    reported skipped and the new head missing), an encoder-only one into any task model.

    Args:
        model: a BertEncoder, a task model, or a keras.Model with one BertEncoder.
        path: checkpoint prefix or directory (its latest checkpoint).

    Returns:
        The report dict; loaded/skipped are object paths such as
        `model/encoder/layer_0/intermediate/_kernel`.
    """
    prefix = common.resolve_prefix(path)
    common.reader(prefix)  # one-line error for an unreadable file
    if not is_object_checkpoint(prefix):
        raise BertError(f"{prefix}: neither an original BERT checkpoint (bert/... names) nor "
                        f"one written by tf.train.Checkpoint")
    ensure_built(model)
    view = tf.train.CheckpointView(prefix)
    enc_path = _encoder_location(view, prefix)
    enc = find_encoder(model)
    # What of the model the file can hold: the whole task model if it was saved whole.
    if enc_path == ("model", "encoder") and isinstance(model, BertTaskModel):
        part, where = model, ("model",)
    else:
        part, where = enc, enc_path
    paths = _variable_paths(part)
    targets = {id(v): (where + paths[id(v)], v) for v in part.weights}
    staging = {path: _staging() for path, _ in targets.values()}
    root = _tree(staging)
    matched = {id(t) for t in view.match(root).values()}
    tf1_of = {id(v): name for name, (v, _) in tf1_name_map(model).items()}
    loaded, missing = [], []
    for path, var in targets.values():
        if id(staging[path]) in matched:
            loaded.append((path, var))
        else:
            missing.append(tf1_of[id(var)])
    missing += [tf1_of[id(v)] for v in model.weights if id(v) not in targets]
    # Unused objects of the saved model (e.g. a pre-training head); optimizer etc. are ignored.
    scope = ("model",) if "model" in view.children(0) else enc_path
    used = {path for path, _ in loaded}
    skipped = [p for p in _leaves(view, _node(view, scope), scope).values() if p not in used]
    try:
        root.read(prefix).expect_partial()
    except (tf.errors.OpError, ValueError) as e:
        raise BertError(f"{prefix}: cannot restore ({str(e).strip().splitlines()[0]})") from None
    # Leaves that received no value are empty layers (e.g. Dropout), not variables.
    probe = {p: _staging() for p in skipped}
    if probe:
        try:
            _tree(probe).read(prefix).expect_partial()
            skipped = [p for p, v in probe.items() if tuple(tf.shape(v).numpy()) != (0,)]
        except (tf.errors.OpError, ValueError):
            pass  # a leaf of another dtype: report them all
    names = lambda ps: ["/".join(p) for p in ps]
    layer_re = common.layer_matcher(re.escape("/".join(enc_path)) + r"/layer_(\d+)/")
    report = common.finish(prefix, model, names(p for p, _ in loaded), names(skipped), missing,
                           layer_re)
    for path, var in loaded:
        value = staging[path]
        shape = tuple(int(d) for d in tf.shape(value).numpy())
        if shape != tuple(var.shape):
            raise BertError(f"{prefix}: {'/'.join(path)} has shape {list(shape)} in the checkpoint"
                            f" but {list(var.shape)} in the model (wrong bert_config for this "
                            f"checkpoint?)")
    for path, var in loaded:
        var.assign(staging[path].numpy().astype(var.dtype, copy=False))
    return report


# ---- the format (bert_tf.convert.source) -----------------------------------------------------

def _detect(path):
    prefix, names = checkpoint_variables(path)
    if prefix and "_CHECKPOINTABLE_OBJECT_GRAPH" in names and is_bert_tf_checkpoint(prefix):
        return prefix
    return None


def _read(prefix):
    from bert_tf.convert import bert_tf_export
    from bert_tf.modeling.config import BertConfig
    directory = parent(prefix)
    own = beside(directory)
    cfg, vocab, casing, hint = own["bert_config"], own["vocab_file"], None, None
    if cfg is None:
        found = bert_tf_export.newest_export(directory)
        if found is None:
            hint = (f"a bert_tf training checkpoint with no bert_config.json beside it and no "
                    f"export under {directory}/export")
        else:
            meta, export_dir = found
            cfg = BertConfig.from_dict(meta["bert_config"], source=export_dir)
            vocab, casing = bert_tf_export.export_vocab(export_dir, meta)
    src = Source("bert_tf", prefix, directory, cfg, vocab, casing,
                 config_file=own["config_file"],
                 loader=lambda model: load_bert_tf_checkpoint(model, prefix),
                 has_mlm=lambda: any("/masked_lm/" in n for n in checkpoint_variables(prefix)[1]))
    if hint:
        src.config_hint = hint
    return src


FORMAT = Format("bert_tf", _detect, _read, heads=True,
                looks_for="a checkpoint under bert_tf's object keys (model, model/encoder)")
