"""Which ops a graph uses, and whether stock TF Serving can run them.

Stock TF Serving links the core TensorFlow kernels plus an older set of tf_text ops; it lacks
FastBertNormalize / FastWordpiece* (tensorflow/serving#2064) and the newer `TFText>*` ops such as
RoundRobinTrim (tensorflow/serving#2267). Python callbacks (PyFunc...) cannot run there at all.

Policy: an op is allowed when it is a core TF op (`tf.raw_ops`, the ops of a plain
`import tensorflow`) or in ALLOWED_TF_TEXT_OPS, and not in DENIED_OPS.
"""
import functools

import bert_tf  # noqa: F401
from bert_tf import BertError

# tf_text ops stock TF Serving registers (conservative: the long-standing ones).
ALLOWED_TF_TEXT_OPS = frozenset({
    "CaseFoldUTF8",
    "NormalizeUTF8",
    "RegexSplitWithOffsets",
    "WordpieceTokenizeWithOffsets",
    "WhitespaceTokenizeWithOffsets",
    "UnicodeScriptTokenizeWithOffsets",
    "ConstrainedSequence",
    "SentenceFragments",
    "SentencepieceOp",
    "SentencepieceTokenizeOp",
    "SentencepieceTokenizeWithOffsetsOp",
    "SentencepieceDetokenizeOp",
    "SentencepieceIdToStringOp",
    "SentencepieceStringToIdOp",
    "SentencepieceVocabSizeOp",
})

# Never allowed, even where registered in the exporting process (PyFunc* are core ops there).
DENIED_OPS = frozenset({
    "FastBertNormalize",
    "FastBertTokenizer",
    "FastWordpieceTokenizeWithOffsets",
    "FastWordpieceDetokenize",
    "TFText>FastWordpieceDetokenize",
    "TFText>RoundRobinTrim",
    "TFText>RoundRobinGenerateMasks",
    "PyFunc",
    "PyFuncStateless",
    "EagerPyFunc",
})
_DENIED_PREFIXES = ("FastBert", "FastWordpiece", "TFText>")


@functools.lru_cache(maxsize=None)
def core_ops():
    """Op names a plain `import tensorflow` registers (tf.raw_ops: never includes tf_text's)."""
    import tensorflow as tf
    return frozenset(name for name in dir(tf.raw_ops) if not name.startswith("_"))


def _ops_in_graph_def(graph_def):
    functions = {f.signature.name for f in graph_def.library.function}
    ops = {node.op for node in graph_def.node}
    for f in graph_def.library.function:
        ops.update(node.op for node in f.node_def)
    # A node may call a library function by name; that is not an op registration.
    return ops - functions


def ops_in_saved_model(export_dir):
    """Op type names over every meta graph and every library function of a SavedModel."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2
    path = tf.io.gfile.join(export_dir, "saved_model.pb")
    if not tf.io.gfile.exists(path):
        raise BertError(f"{export_dir}: no saved_model.pb")
    proto = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(path, "rb") as f:
        proto.ParseFromString(f.read())
    ops = set()
    for meta_graph in proto.meta_graphs:
        ops |= _ops_in_graph_def(meta_graph.graph_def)
    return ops


def ops_in_concrete_function(fn):
    """Op type names of a ConcreteFunction (or a tf.function with one traced signature), nested
    functions (cond/while branches, calls) included."""
    if not hasattr(fn, "graph"):
        try:
            fn = fn.get_concrete_function()
        except (AttributeError, TypeError, ValueError) as e:
            raise BertError(f"ops_in_concrete_function: need a ConcreteFunction ({e})") from None
    return _ops_in_graph_def(fn.graph.as_graph_def())


def unsafe_ops(op_names):
    """The subset of op_names stock TF Serving cannot run, sorted."""
    core = core_ops()
    return sorted(op for op in set(op_names)
                  if op in DENIED_OPS or op.startswith(_DENIED_PREFIXES)
                  or (op not in core and op not in ALLOWED_TF_TEXT_OPS))


def check_serving_safe(op_names, what="graph"):
    """Raises BertError naming the ops stock TF Serving lacks."""
    bad = unsafe_ops(op_names)
    if bad:
        raise BertError(f"{what}: ops not available in stock TF Serving: {', '.join(bad)}")
