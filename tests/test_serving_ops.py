"""TF Serving op policy: minimum 2.12, its tf_text ops allowed, newer ones and PyFunc denied."""
import json

import pytest
import tensorflow as tf
import tensorflow_text as tf_text

import bert_tf
from bert_tf.export import serving_ops


def test_policy_names_tf_serving_2_12_and_its_tf_text_ops():
    assert serving_ops.MIN_TF_SERVING_VERSION == "2.12"
    # tf_text 2.12.1 (pinned by TF Serving 2.12-2.19) has the Fast ops ...
    assert serving_ops.unsafe_ops({"FastBertNormalize", "FastWordpieceTokenizeWithOffsets",
                                   "RegexSplitWithOffsets", "MatMul"}) == []
    # ... but not what tf_text >= 2.13 emits, and Python callbacks never run in TF Serving.
    for op in ("TFText>RoundRobinTrim", "TFText>Utf8Binarize", "TFText>SomethingNew",
               "PyFunc", "PyFuncStateless", "EagerPyFunc", "MadeUpOp"):
        assert serving_ops.unsafe_ops({op, "MatMul"}) == [op]


def test_utf8_binarize_is_flagged_in_a_real_graph():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def fn(x):
        return tf_text.utf8_binarize(x)

    ops = serving_ops.ops_in_concrete_function(fn)
    assert serving_ops.unsafe_ops(ops) == ["TFText>Utf8Binarize"]
    with pytest.raises(bert_tf.BertError, match=r"^bin: ops not available in stock TF Serving: "
                                                r"TFText>Utf8Binarize \(exports target TF "
                                                r"Serving >= 2\.12\)$"):
        serving_ops.check_serving_safe(ops, "bin")


def test_requirements_json_records_the_minimum_and_the_tf_text_ops():
    vocab = ["[UNK]", "a", "##b"]
    tok = tf_text.FastBertTokenizer(vocab=vocab, lower_case_nfd_strip_accents=True)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def fn(x):
        return tok.tokenize(x)

    ops = serving_ops.ops_in_concrete_function(fn)
    doc = json.loads(serving_ops.requirements_json(ops, "pre"))
    assert doc["min_tf_serving_version"] == "2.12"
    assert doc["tf_text_ops"] == ["FastBertNormalize", "FastWordpieceTokenizeWithOffsets"]
    assert serving_ops.REQUIREMENTS_FILE.endswith(".json")
    with pytest.raises(bert_tf.BertError, match="^enc: .*PyFunc"):
        serving_ops.requirements_json(ops | {"PyFunc"}, "enc")
