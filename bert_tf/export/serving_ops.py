"""Which ops a graph uses, and whether stock TF Serving (of the declared minimum version) runs them.

Stock TF Serving links the core TensorFlow kernels plus tf_text's whole `ops_lib`, at the tf_text
version its release pins: 2.11 pins tf_text 2.8.2 (no FastBertNormalize, tensorflow/serving#2064),
2.12 to 2.19 pin 2.12.1 (FastBertNormalize and FastWordpieceTokenizeWithOffsets included), and
only 2.20 has the newer `TFText>RoundRobinTrim` / `TFText>Utf8Binarize` (tensorflow/serving#2267).
Python callbacks (PyFunc...) never run there.

Policy: exports need TF Serving >= MIN_TF_SERVING_VERSION. An op is allowed when it is a core TF
op (`tf.raw_ops`, the ops of a plain `import tensorflow`) or in ALLOWED_TF_TEXT_OPS (tf_text ops
that 2.12's tf_text 2.12.1 registers), and not in DENIED_OPS. `requirements_json` gives the text
an export records next to the model (`assets.extra/`), so the minimum travels with it.
"""
import functools
import json

import bert_tf  # noqa: F401
from bert_tf import BertError

MIN_TF_SERVING_VERSION = "2.12"
REQUIREMENTS_FILE = "tf_serving_requirements.json"  # under assets.extra/

# tf_text ops that TF Serving 2.12 (tf_text 2.12.1's ops_lib) registers; conservative: only ops
# known to be there, so a missing entry can only make the check stricter.
ALLOWED_TF_TEXT_OPS = frozenset({
    "FastBertNormalize",
    "FastWordpieceTokenizeWithOffsets",
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

# Never allowed: tf_text ops newer than TF Serving 2.12 (RoundRobinTrimmer emits RoundRobinTrim
# from tf_text 2.13 on), and Python callbacks (core ops in the exporting process).
DENIED_OPS = frozenset({
    "TFText>RoundRobinTrim",
    "TFText>RoundRobinGenerateMasks",
    "TFText>Utf8Binarize",
    "PyFunc",
    "PyFuncStateless",
    "EagerPyFunc",
})
_DENIED_PREFIXES = ("TFText>",)


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
    """Raises BertError naming the ops stock TF Serving (>= MIN_TF_SERVING_VERSION) lacks.

    Args:
        op_names: op type names of the graph(s) to be served.
        what: names the export in the error.
    """
    bad = unsafe_ops(op_names)
    if bad:
        raise BertError(f"{what}: ops not available in stock TF Serving: {', '.join(bad)} "
                        f"(exports target TF Serving >= {MIN_TF_SERVING_VERSION})")


def requirements_json(op_names, what="graph"):
    """The text export code writes to `assets.extra/REQUIREMENTS_FILE`.

    Args:
        op_names: every op of the export (`ops_in_saved_model`).
        what: names the export in the error when an op is not allowed.

    Returns:
        JSON text: the minimum TF Serving version and the tf_text ops that set it.
    """
    check_serving_safe(op_names, what)
    core = core_ops()
    text_ops = sorted(op for op in set(op_names) if op not in core)
    return json.dumps({
        "min_tf_serving_version": MIN_TF_SERVING_VERSION,
        "tf_text_ops": text_ops,
        "note": "stock TF Serving >= 2.12 links these ops (tf_text 2.12.1 ops_lib); "
                "2.11 lacks FastBertNormalize",
    }, indent=1, sort_keys=True) + "\n"
