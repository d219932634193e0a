"""SavedModel exports (bert_tf.export): serving-safe graphs, parity in a fresh TF-only process,
signatures, bad requests, preprocessor API, TF Serving layout + warm-up replay, Keras loading.

One module-scoped set of exports (tiny model, seq 16) serves every test: each export traces
the in-graph tokenizer and model, which costs several seconds. References are computed
independently: Python FullTokenizer + packing in Python + the Keras model.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import bert_tf  # noqa: F401
import keras
import tensorflow as tf

from bert_tf import BertError, fileio, tokenization

from bert_tf.export import serving_ops
from bert_tf.modeling import encoder as be
from bert_tf.modeling import models as bm
from bert_tf.export import common, serving
from conftest import original_pack, task_models, tiny_bert_config

SEQ = 16
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", "!", "'", "-",
         "the", "quick", "brown", "fox", "jump", "##s", "##ed", "over", "lazy", "dog", "a", "is",
         "of", "capital", "france", "paris", "who", "what", "where", "city", "river", "flows",
         "through", "cafe", "in", "and", "run", "##ning", "un", "##want", "北", "京", "东", "é",
         "big", "small", "cat", "sat", "on", "mat", "berlin", "germany", "seine"]
LABELS = ["negative", "neutral", "positive"]
TAGS = ["O", "B-LOC", "I-LOC", "B-PER"]
LONG = " ".join(["The quick brown fox jumps over the lazy dog."] * 30)
SENTENCES = ["The quick brown fox jumps over the lazy dog.", "", LONG,
             "Café in Paris — 北京 and 東京 😀 naïve RUNNING!", "   \t\n ", "unwanted cat"]
ONE = ["What is the capital of France?"]
PAIRS = [("Who jumps?", "The quick brown fox jumps over the lazy dog."),
         ("Where is Paris?", ""), (LONG, "a small cat"), ("the cat", LONG),
         ("", "The Seine flows through Paris."), ("北京", "Café 😀")]
MASKED = ["The capital of France is [MASK].", "[MASK] is a [MASK] [MASK] city!", "no masks here",
          "", "[mask] lower-case literal is plain text", LONG + " [MASK]",
          " ".join(["[MASK]"] * 10)]
SLOW_TASKS = ("embeddings", "regression")  # op sets are subsets of classification's
DEFAULT_TASKS = ("fill_mask", "classification", "span", "tagging")


# ---- references (no SavedModel involved) ---------------------------------------------------

def py_ids(tok, text):
    return tok.convert_tokens_to_ids(tok.tokenize(text))


def py_pack(a, b=None, seq=SEQ):
    """The original's packing (conftest.original_pack) with this vocab's [CLS]/[SEP]."""
    return original_pack(a, b, seq, cls=2, sep=3)


def py_batch(tok, texts, texts_b=None):
    rows = [py_pack(py_ids(tok, a), py_ids(tok, b) if texts_b else None)
            for a, b in zip(texts, texts_b or texts)]
    return {k: np.array([r[i] for r in rows], np.int32)
            for i, k in enumerate(("input_word_ids", "input_mask", "input_type_ids"))}


def py_masked_ids(tok, text):
    parts = text.split("[MASK]")
    out = []
    for i, part in enumerate(parts):
        out += py_ids(tok, part) + ([4] if i < len(parts) - 1 else [])
    return out


def np_out(x):
    return {k: keras.ops.convert_to_numpy(v) for k, v in x.items()}


def at_padding(x, mask, value):
    """`x` [B, S, ...] with `value` where mask is 0: what exports serve at padding (they
    compute only the real tokens)."""
    keep = np.asarray(mask).reshape(np.shape(mask) + (1,) * (np.ndim(x) - 2)) > 0
    return np.where(keep, x, np.asarray(value, np.asarray(x).dtype))


def reference(exp, name, signature, inputs):
    """What the export `name` must return for `inputs`, from the Keras models."""
    tok, models = exp.tok, exp.models
    if name == "pre":
        return py_batch(tok, inputs["text"], inputs.get("text_b"))
    if name == "enc":
        out = np_out(models["fill_mask"].encoder(inputs, training=False))
        pad = lambda x: at_padding(x, inputs["input_mask"], 0.0)
        return {"pooled_output": out["pooled_output"],
                "sequence_output": pad(out["sequence_output"]),
                "encoder_outputs": np.stack([pad(x) for x in out["encoder_outputs"]], axis=1)}
    task = name
    if signature == "predict_ids":
        ids = inputs
    elif task == "fill_mask":
        texts_b = inputs.get("text_b")
        rows = [py_pack(py_masked_ids(tok, a), py_masked_ids(tok, b) if texts_b else None)
                for a, b in zip(inputs["text"], texts_b or inputs["text"])]
        ids = {k: np.array([r[i] for r in rows], np.int32)
               for i, k in enumerate(("input_word_ids", "input_mask", "input_type_ids"))}
    else:
        ids = py_batch(tok, inputs["text"], inputs.get("text_b"))
    model = models[task]
    vocab = np.array(VOCAB, object)
    if task == "fill_mask":
        mask = (ids["input_word_ids"] == 4) & (ids["input_mask"] > 0)
        positions = [np.flatnonzero(r)[:8] for r in mask]
        pos = np.array([np.pad(p, (0, 8 - len(p))) for p in positions], np.int32)
        logits = np_out(model(dict(ids, masked_lm_positions=pos), training=False))["mlm_logits"]
        probs = keras.ops.convert_to_numpy(keras.ops.softmax(logits, axis=-1))
        top = np.argsort(-probs, axis=-1, kind="stable")[..., :5]
        ok = (np.arange(8)[None, :] < np.array([len(p) for p in positions])[:, None])[..., None]
        return {"mask_count": np.array([len(p) for p in positions], np.int32),
                "mask_positions": np.where(ok[..., 0], pos, -1),
                "top_k_ids": np.where(ok, top, -1),
                "top_k_scores": np.where(ok, np.take_along_axis(probs, top, -1), 0.0),
                "top_k_tokens": np.where(ok, vocab[top], "")}
    out = np_out((model.encoder if task == "embeddings" else model)(ids, training=False))
    mask = ids["input_mask"] > 0
    tokens = np.where(mask, vocab[ids["input_word_ids"]], "")
    if task == "embeddings":
        return {"pooled_output": out["pooled_output"],
                "sequence_output": at_padding(out["sequence_output"], mask, 0.0)}
    if task == "regression":
        return {"score": out["logits"][:, 0]}
    if task == "classification":
        logits = out["logits"]
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        return {"logits": logits, "probabilities": probs,
                "label_id": logits.argmax(-1).astype(np.int32),
                "label": np.array(LABELS, object)[logits.argmax(-1)]}
    if task == "tagging":
        tag_ids = out["logits"].argmax(-1)
        return {"logits": at_padding(out["logits"], mask, 0.0),
                "tag_ids": np.where(mask, tag_ids, -1),
                "tags": np.where(mask, np.array(TAGS, object)[tag_ids], ""), "tokens": tokens}
    # span: brute-force best (start <= end < start + 30) over the context's real tokens
    start, end = out["start_logits"], out["end_logits"]
    res = {"start_logits": at_padding(start, mask, common.SPAN_PAD_LOGIT),
           "end_logits": at_padding(end, mask, common.SPAN_PAD_LOGIT), "start_index": [],
           "end_index": [],
           "answer": [], "tokens": tokens}
    for r in range(len(start)):
        real = mask[r] & ~np.isin(ids["input_word_ids"][r], [2, 3])
        if (real & (ids["input_type_ids"][r] == 1)).any():
            real &= ids["input_type_ids"][r] == 1
        best = max(((start[r, i] + end[r, j], i, j) for i in np.flatnonzero(real)
                    for j in np.flatnonzero(real) if 0 <= j - i < 30), default=(0, -1, -1))
        res["start_index"].append(best[1])
        res["end_index"].append(best[2])
        words = " ".join(tokens[r, best[1]:best[2] + 1]) if best[1] >= 0 else ""
        res["answer"].append(words.replace(" ##", ""))
    return res


def assert_outputs(got, want, where):
    assert set(want) <= set(got), (where, sorted(got))
    for k, w in want.items():
        g = np.asarray(got[k])
        w = np.asarray(w)
        if w.dtype.kind in "OUS" or g.dtype.kind in "OUS":
            g = np.vectorize(lambda s: s.decode() if isinstance(s, bytes) else s,
                             otypes=[object])(g) if g.size else g
            assert g.tolist() == w.tolist(), (where, k)
        elif w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, atol=1e-5, rtol=0, err_msg=f"{where} {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{where} {k}")


# ---- exports ---------------------------------------------------------------------------------

class Exports:
    """Lazily exported SavedModels (exp[name] -> dir), plus the models and tokenizer behind them."""

    def __init__(self, base):
        self.base = base
        self.dirs = {}
        self.vocab = os.path.join(base, "vocab.txt")
        with open(self.vocab, "w", encoding="utf-8") as f:
            f.write("\n".join(VOCAB) + "\n")
        self.tok = tokenization.FullTokenizer(self.vocab, do_lower_case=True)
        self.models = task_models(len(VOCAB), seed=11)
        self.publish_log = []
        self.traces = {}  # name -> `training` of every BertEncoder.call while exporting it

    def __getitem__(self, name):
        if name not in self.dirs:
            calls = self.traces[name] = []
            real = be.BertEncoder.call

            def counted(layer, *args, **kwargs):
                calls.append(kwargs.get("training"))
                return real(layer, *args, **kwargs)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(be.BertEncoder, "call", counted)
                self.dirs[name] = self._export(name)
        return self.dirs[name]

    def _export(self, name):
        from bert_tf import export
        path = os.path.join(self.base, name)
        if name == "pre":
            export.export_preprocessor(self.vocab, True, path, seq_length=SEQ,
                                       extra_pack_seq_lengths=(8,))
        elif name == "enc":
            export.export_encoder(self.models["fill_mask"], path, with_mlm=True)
        elif name == "fill_mask":
            # Through the serving layout, watching what the final name shows while writing.
            real_rename = fileio._rename_dir

            def watched(src, dst):
                self.publish_log.append({
                    "src_files": sorted(os.path.relpath(os.path.join(d, f), src)
                                        for d, _, fs in os.walk(src) for f in fs),
                    "dst_exists": os.path.exists(dst),
                    "versions": serving.version_dirs(os.path.dirname(dst))})
                real_rename(src, dst)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(fileio, "_rename_dir", watched)
                path = serving.export_for_serving(
                    os.path.join(self.base, "serving"), "bert_fill_mask",
                    model=self.models["fill_mask"], vocab_file=self.vocab, task="fill_mask",
                    seq_length=SEQ)
        else:
            export.export_end_to_end(self.models[name], self.vocab, True, path, task=name,
                                     seq_length=SEQ, labels={"classification": LABELS,
                                                             "tagging": TAGS}.get(name))
        return path


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    return Exports(str(tmp_path_factory.mktemp("exports")))


def all_requests(exp, names, full=True):
    """{key: (export name, signature, inputs)}: real sentences incl. empty, long (truncated),
    non-ASCII/CJK/emoji text and a batch of one, for every signature (full=False: pairs and
    predict_ids only where the default suite needs them; each signature's first call costs
    a graph optimisation pass)."""
    pairs = {"text": [a for a, _ in PAIRS], "text_b": [b for _, b in PAIRS]}
    out = {}
    for name in names:
        if name == "enc":
            out["enc/serving_default"] = (name, "serving_default", py_batch(exp.tok, SENTENCES))
            continue
        texts = MASKED if name == "fill_mask" else SENTENCES
        out[f"{name}/serving_default"] = (name, "serving_default", {"text": texts})
        out[f"{name}/serving_default/one"] = (name, "serving_default", {"text": ONE})
        if name == "fill_mask":
            pairs = {"text": MASKED[:3], "text_b": ["[MASK] dog", "", LONG]}
        if full or name in ("pre", "span", "fill_mask"):
            out[f"{name}/serving_pairs"] = (name, "serving_pairs", pairs)
        if name != "pre" and (full or name == "classification"):
            out[f"{name}/predict_ids"] = (name, "predict_ids",
                                          py_batch(exp.tok, SENTENCES[:2], ["the cat", ""]))
    return out


# A process that imports nothing but TensorFlow and tf_text ops runs every request through the
# TF2 loader and through a TF1 session (the C++ LoadSavedModel + Session::Run path TF Serving
# uses), writing JSON results.
FRESH = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tf_text ops, as TF Serving links them)
    assert "bert_tf" not in sys.modules
    spec, tf1_keys = json.load(open(sys.argv[1]))
    def tensor(v, dtype):
        return np.array(v, dtype=object if dtype == "string" else dtype)
    def plain(v):
        v = np.asarray(v)
        if v.dtype == object:
            return np.vectorize(lambda s: s.decode("utf-8"), otypes=[object])(v).tolist()
        return v.tolist()
    results = {}
    for d, cases in spec.items():
        m = tf.saved_model.load(d)
        for key, sig, inputs, dtypes in cases:
            out = m.signatures[sig](**{k: tf.constant(tensor(v, dtypes[k]))
                                      for k, v in inputs.items()})
            results[key] = {k: plain(v.numpy()) for k, v in out.items()}
        tf1_cases = [c for c in cases if c[0] in tf1_keys]
        if not tf1_cases:
            continue
        with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
            mg = tf.compat.v1.saved_model.load(sess, ["serve"], d)
            for key, sig, inputs, dtypes in tf1_cases:
                sd = mg.signature_def[sig]
                got = sess.run({k: t.name for k, t in sd.outputs.items()},
                               {sd.inputs[k].name: tensor(v, dtypes[k])
                                for k, v in inputs.items()})
                results[key + "/tf1"] = {k: plain(v) for k, v in got.items()}
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skips TF's teardown (seconds); the results are written
""")


def run_fresh(exp, names, tmp_path, tf1_keys, full):
    """Runs FRESH on all_requests(exp, names, full); tf1_keys: the requests also run through
    the TF1 session (each new signature there costs seconds)."""
    cases = {}
    expected = {}
    for key, (name, sig, inputs) in all_requests(exp, names, full).items():
        dtypes = {k: "int32" if isinstance(v, np.ndarray) else "string"
                  for k, v in inputs.items()}
        plain_inputs = {k: np.asarray(v).tolist() for k, v in inputs.items()}
        cases.setdefault(exp[name], []).append((key, sig, plain_inputs, dtypes))
        expected[key] = reference(exp, name, sig, inputs)
    asked = set(tf1_keys)
    tf1_keys = [k for k in expected if k in asked or k.split("/")[0] in asked]
    # Every key asked for names a request (a renamed one must not drop the TF1 check).
    assert asked and asked <= set(expected) | {k.split("/")[0] for k in expected}, asked
    (tmp_path / "spec.json").write_text(json.dumps([cases, tf1_keys]), encoding="utf-8")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-c", FRESH, str(tmp_path / "spec.json"),
                           str(tmp_path / "out.json")], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    for key, want in expected.items():
        assert_outputs(got[key], want, key)
        if key in tf1_keys:
            assert_outputs(got[key + "/tf1"], want, key + "/tf1")
    return got


def test_fresh_process_matches_in_memory_models(exp, tmp_path):
    # The TF1 session path (TF Serving's loader) for the serving-layout export's default
    # signature; every signature of every export through it: the slow test below.
    got = run_fresh(exp, ("pre", "enc") + DEFAULT_TASKS, tmp_path,
                    ["fill_mask/serving_default", "fill_mask/serving_default/one"], full=False)
    # The cases are not vacuous: truncation, empty text, [UNK], [MASK] handling all happened.
    pre = got["pre/serving_default"]
    assert pre["input_mask"][2] == [1] * SEQ and pre["input_word_ids"][2][-1] == 3
    assert pre["input_word_ids"][1][:3] == [2, 3, 0]         # "" -> [CLS] [SEP]
    assert 1 in pre["input_word_ids"][3]                     # emoji, 東京 -> [UNK]
    fill = got["fill_mask/serving_default"]
    # masks: 1; 3; none; none; "[mask]" is plain text; cut off by truncation; 10 -> max_masks 8
    assert fill["mask_count"] == [1, 3, 0, 0, 0, 0, 8]
    assert fill["mask_positions"][0][:2] == [6, -1]           # [CLS] the capital of france is
    assert got["classification/serving_default/one"]["label"][0] in LABELS
    assert got["span/serving_pairs"]["start_index"][0] >= 5   # inside the context


@pytest.mark.slow
def test_fresh_process_all_tasks_all_signatures_both_loaders(exp, tmp_path):
    names = ("pre", "enc") + DEFAULT_TASKS + SLOW_TASKS
    run_fresh(exp, names, tmp_path, names, full=True)


# ---- serving safety ---------------------------------------------------------------------------

def graph_op_split(export_dir):
    """(ops of the top-level graphs, ops of all graphs incl. every library function)."""
    from tensorflow.core.protobuf import saved_model_pb2
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    top = {n.op for mg in proto.meta_graphs for n in mg.graph_def.node}
    return top, serving_ops.ops_in_saved_model(export_dir)


@pytest.mark.parametrize("name", ["pre", "enc"] + list(DEFAULT_TASKS) + [
    pytest.param(t, marks=pytest.mark.slow) for t in SLOW_TASKS])
def test_every_function_graph_uses_only_allowlisted_ops(exp, name):
    top, ops = graph_op_split(exp[name])
    assert serving_ops.unsafe_ops(ops) == []
    serving_ops.check_serving_safe(ops, name)
    # the walk reaches inside function bodies (the top-level graph only holds calls)
    assert "MatMul" not in top and ("MatMul" in ops or name == "pre")
    if name != "enc":
        # fast path (TF Serving >= 2.12) + the exact path's composed steps
        assert {"FastBertNormalize", "FastWordpieceTokenizeWithOffsets", "RegexSplitWithOffsets",
                "NormalizeUTF8", "StaticRegexFullMatch"} <= ops
        assert not {op for op in ops if op.startswith("TFText>") or "PyFunc" in op}
    assert {"HashTableV2", "InitializeTableFromTextFileV2"} & ops or name == "enc"


def test_allowlist_accepts_fast_bert_rejects_py_func():
    import tensorflow_text as tf_text

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def fast(x):
        tok = tf_text.FastBertTokenizer(["[UNK]", "a"], token_out_type=tf.int64)
        return tok.tokenize(x).flat_values

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def py(x):
        return tf.numpy_function(lambda v: v * 2, [x], tf.float32)

    fast_ops = serving_ops.ops_in_concrete_function(fast)
    py_ops = serving_ops.ops_in_concrete_function(py)
    assert serving_ops.unsafe_ops(fast_ops) == []  # TF Serving >= 2.12 links the Fast ops
    assert serving_ops.unsafe_ops(py_ops) == ["PyFunc"]
    with pytest.raises(BertError, match="ops not available in stock TF Serving: PyFunc"):
        serving_ops.check_serving_safe(py_ops, "py")
    assert serving_ops.unsafe_ops({"MatMul", "CaseFoldUTF8", "MadeUpOp"}) == ["MadeUpOp"]


def signature_table(export_dir):
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    out = {}
    for key, sd in proto.meta_graphs[0].signature_def.items():
        if key.startswith("__"):  # __saved_model_init_op: not a serving signature
            continue
        def table(m):
            return {k: (types_pb2.DataType.Name(t.dtype),
                        [d.size for d in t.tensor_shape.dim]) for k, t in m.items()}
        out[key] = (table(sd.inputs), table(sd.outputs))
    return out


IDS_IN = {k: ("DT_INT32", [-1, -1]) for k in ("input_word_ids", "input_mask", "input_type_ids")}
IDS_OUT = {k: ("DT_INT32", [-1, SEQ]) for k in ("input_word_ids", "input_mask", "input_type_ids")}
TEXT = {"text": ("DT_STRING", [-1])}
PAIR = {"text": ("DT_STRING", [-1]), "text_b": ("DT_STRING", [-1])}


def test_signatures_dtypes_and_shapes(exp):
    assert signature_table(exp["pre"]) == {"serving_default": (TEXT, IDS_OUT),
                                           "serving_pairs": (PAIR, IDS_OUT)}
    assert signature_table(exp["enc"]) == {"serving_default": (IDS_IN, {
        "pooled_output": ("DT_FLOAT", [-1, 32]), "sequence_output": ("DT_FLOAT", [-1, -1, 32]),
        "encoder_outputs": ("DT_FLOAT", [-1, 2, -1, 32])})}
    fill = {"mask_count": ("DT_INT32", [-1]), "mask_positions": ("DT_INT32", [-1, 8]),
            "top_k_ids": ("DT_INT32", [-1, 8, 5]), "top_k_tokens": ("DT_STRING", [-1, 8, 5]),
            "top_k_scores": ("DT_FLOAT", [-1, 8, 5])}
    fill_ids = dict(fill, mask_positions=("DT_INT32", [-1, 8]))
    assert signature_table(exp["fill_mask"]) == {
        "serving_default": (TEXT, fill), "serving_pairs": (PAIR, fill),
        "predict_ids": (IDS_IN, fill_ids), "preprocess": (TEXT, IDS_OUT)}
    cls = signature_table(exp["classification"])
    assert cls["serving_default"] == (TEXT, {
        "logits": ("DT_FLOAT", [-1, 3]), "probabilities": ("DT_FLOAT", [-1, 3]),
        "label_id": ("DT_INT32", [-1]), "label": ("DT_STRING", [-1])})
    tag = signature_table(exp["tagging"])
    assert tag["serving_default"][1] == {
        "logits": ("DT_FLOAT", [-1, SEQ, 4]), "tag_ids": ("DT_INT32", [-1, SEQ]),
        "tags": ("DT_STRING", [-1, SEQ]), "tokens": ("DT_STRING", [-1, SEQ])}
    assert tag["predict_ids"][1]["tags"] == ("DT_STRING", [-1, -1])
    span = signature_table(exp["span"])["serving_pairs"][1]
    assert span["start_index"] == ("DT_INT32", [-1]) and span["answer"] == ("DT_STRING", [-1])


def test_saved_model_cli_show_all(exp):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    proc = subprocess.run([cli, "show", "--dir", exp["fill_mask"], "--all"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    for sig in ("serving_default", "serving_pairs", "predict_ids", "preprocess"):
        assert f"signature_def['{sig}']:" in out
    default = out.split("signature_def['serving_default']:")[1].split("signature_def[")[0]
    assert "inputs['text'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in default
    assert "outputs['top_k_tokens'] tensor_info:\n        dtype: DT_STRING\n" \
           "        shape: (-1, 8, 5)" in default
    assert "outputs['top_k_scores'] tensor_info:\n        dtype: DT_FLOAT\n" in default
    predict = out.split("signature_def['predict_ids']:")[1].split("signature_def[")[0]
    assert "inputs['input_word_ids'] tensor_info:\n        dtype: DT_INT32\n" \
           "        shape: (-1, -1)" in predict
    # the CLI's own op listing (of the top-level graph) passes the allowlist too
    listed = out.split("contains the following ops:")[1].splitlines()[0]
    ops = {op.strip(" '{}") for op in listed.split(",")}
    assert "StatefulPartitionedCall" in ops and serving_ops.unsafe_ops(ops) == []


def flat_call(fn, **tensors):
    """Calls a loaded signature the way TF Serving feeds it: no Python-side spec checks."""
    names = [t.name.split(":")[0] for t in fn.inputs[:len(tensors)]]
    return fn._call_flat([tf.constant(tensors[n]) for n in names], fn.captured_inputs)


def test_bad_requests_are_invalid_argument_errors(exp):
    m = tf.saved_model.load(exp["classification"])
    text = m.signatures["serving_default"]
    pairs = m.signatures["serving_pairs"]
    ids = m.signatures["predict_ids"]
    good = py_batch(exp.tok, ["a cat"])
    cases = [
        (text, {"text": np.array([1, 2], np.int32)}, "expected to be a string tensor"),
        (text, {"text": np.array([["a", "b"]], object)}, "text"),
        (text, {"text": np.array("a", object)}, "text"),
        (pairs, {"text": np.array(["a", "b"], object), "text_b": np.array(["a"], object)},
         "same batch"),
        (ids, dict(good, input_word_ids=good["input_word_ids"].astype(np.float32)),
         "expected to be a int32 tensor"),
        (ids, dict(good, input_word_ids=good["input_word_ids"][0]), "input_word_ids"),
        (ids, dict(good, input_word_ids=good["input_word_ids"] + 1000), "< vocab_size"),
        (ids, dict(good, input_type_ids=good["input_type_ids"] + 5), "type_vocab_size"),
        (ids, dict(good, input_mask=good["input_mask"][:, :3]),
         "input_mask must have input_word_ids"),
        (ids, {k: np.zeros([1, 65], np.int32) for k in good}, "max_position_embeddings"),
    ]
    for i, (fn, inputs, message) in enumerate(cases):
        try:
            flat_call(fn, **inputs)
            raise AssertionError(f"case {i}: no error")
        except tf.errors.InvalidArgumentError as e:
            assert message in str(e), (i, str(e)[:300])
    # the process (and the model) still serve afterwards
    out = text(text=tf.constant(["a cat"]))
    assert out["label"].numpy()[0].decode() in LABELS
    # through the Python signature wrapper too
    with pytest.raises(tf.errors.InvalidArgumentError, match="expected to be a string tensor"):
        text(text=tf.constant([1, 2]))


# ---- preprocessor API ---------------------------------------------------------------------------

def test_preprocessor_tokenize_and_bert_pack_inputs(exp):
    p = tf.saved_model.load(exp["pre"])
    a = ["the quick brown fox jumps over the lazy dog", "", "running cafe"]
    b = ["a cat", "a big small cat sat on the mat", ""]
    tok_a = p.tokenize(tf.constant(a))
    assert isinstance(tok_a, tf.RaggedTensor) and tok_a.ragged_rank == 2
    want = [[exp.tok.convert_tokens_to_ids(exp.tok.wordpiece_tokenizer.tokenize(w))
             for w in exp.tok.basic_tokenizer.tokenize(t)] for t in a]
    assert tok_a.to_list() == want                      # [batch, words, pieces]
    assert want[0][4] == [15, 16] and want[2] == [[37, 38], [34]]  # jump ##s, run ##ning
    tok_b = p.tokenize(tf.constant(b))
    packed = {k: v.numpy() for k, v in p.bert_pack_inputs([tok_a, tok_b], seq_length=8).items()}
    # seq 8: 5 slots; a=10 pieces, b=2 -> a cut to 3 (longer side first); "" + b; a + ""
    assert packed["input_word_ids"].tolist() == [
        [2, 11, 12, 13, 3, 21, 47, 3],
        [2, 3, 21, 45, 46, 47, 48, 3],
        [2, 37, 38, 34, 3, 0, 0, 0]]
    assert packed["input_type_ids"].tolist() == [
        [0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1, 1], [0] * 8]
    assert packed["input_mask"].tolist() == [[1] * 8, [1] * 8, [1] * 5 + [0] * 3]
    # default seq_length and one segment == the default signature
    single = p.bert_pack_inputs([tok_a])
    direct = p(tf.constant(a))
    for k in direct:
        np.testing.assert_array_equal(single[k].numpy(), direct[k].numpy())
        assert direct[k].shape == (3, SEQ)
    ref = py_batch(exp.tok, a, b)
    pairs = p.signatures["serving_pairs"](text=tf.constant(a), text_b=tf.constant(b))
    for k in ref:
        np.testing.assert_array_equal(pairs[k].numpy(), ref[k])
    # the vocab travelled as an asset
    assert os.listdir(os.path.join(exp["pre"], "assets"))
    assert common.read_metadata(exp["pre"])["pack_seq_lengths"] == [8, SEQ]


# ---- TF Serving layout, warm-up, atomic publish ----------------------------------------------

def test_serving_layout_warmup_replay_and_atomic_publish(exp):
    version_dir = exp["fill_mask"]
    model_dir = os.path.dirname(version_dir)
    assert version_dir == os.path.join(exp.base, "serving", "bert_fill_mask", "1")
    assert sorted(os.listdir(model_dir)) == ["1"]       # no temp dirs left behind
    for f in ("saved_model.pb", "variables/variables.index", "assets/vocab.txt",
              "assets.extra/tf_serving_warmup_requests", "assets.extra/bert_tf_export.json",
              "assets.extra/tf_serving_requirements.json"):
        assert os.path.exists(os.path.join(version_dir, f)), f
    with open(os.path.join(version_dir, "assets.extra", "tf_serving_requirements.json")) as f:
        requirements = json.load(f)
    assert requirements["min_tf_serving_version"] == "2.12"
    assert "FastWordpieceTokenizeWithOffsets" in requirements["tf_text_ops"]
    # while the version was being written, the final name did not exist and TF Serving would
    # have seen no version; the temp dir was complete when it was renamed into place
    (log,) = exp.publish_log
    assert log["dst_exists"] is False and log["versions"] == []
    assert {"saved_model.pb", "assets.extra/tf_serving_warmup_requests"} <= set(log["src_files"])
    meta = common.read_metadata(version_dir)
    assert (meta["model_name"], meta["version"], meta["task"]) == ("bert_fill_mask", 1,
                                                                   "fill_mask")
    assert serving.next_version(model_dir) == 2
    with pytest.raises(BertError, match="version 1 already exists"):
        serving.export_for_serving(os.path.join(exp.base, "serving"), "bert_fill_mask", 1,
                                   model=exp.models["fill_mask"], vocab_file=exp.vocab,
                                   task="fill_mask")
    # warm-up records are PredictionLogs of real PredictRequests; replay them
    requests = serving.read_warmup_file(
        os.path.join(version_dir, "assets.extra", "tf_serving_warmup_requests"))
    assert [r.model_spec.signature_name for r in requests] == [
        "serving_default", "serving_default", "serving_pairs", "predict_ids"]
    assert {r.model_spec.name for r in requests} == {"bert_fill_mask"}
    assert [tf.make_ndarray(requests[1].inputs["text"]).tolist()] == [
        [t.encode() for t in serving.DEFAULT_FILL_MASK_TEXTS]]
    assert requests[3].inputs["input_word_ids"].dtype == tf.int32.as_datatype_enum
    loaded = tf.saved_model.load(version_dir)
    replayed = [serving.run_predict_request(loaded, r) for r in requests]
    texts = list(serving.DEFAULT_FILL_MASK_TEXTS)
    want = reference(exp, "fill_mask", "serving_default", {"text": texts})
    assert_outputs(replayed[1], want, "warm-up")
    assert_outputs(replayed[3], want, "warm-up predict_ids")
    assert replayed[1]["top_k_tokens"][0][0][0].decode() in VOCAB
    assert replayed[1]["mask_count"].tolist() == [1, 2]


# ---- Keras loading ------------------------------------------------------------------------------

def test_keras_classifier_on_loaded_preprocessor_and_encoder_trains(exp):
    from bert_tf.export import load_as_keras_layer
    keras.utils.set_random_seed(3)
    pre = load_as_keras_layer(exp["pre"])
    enc = load_as_keras_layer(exp["enc"], trainable=True)
    assert pre.trainable_weights == [] and len(enc.trainable_weights) == len(
        exp.models["fill_mask"].encoder.weights)
    text = keras.Input(shape=(), dtype="string")
    pooled = enc(pre(text))["pooled_output"]
    model = keras.Model(text, keras.layers.Dense(2, name="head")(pooled))
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.array(["the cat sat on the mat", "a big dog", "paris is a city", "the fox jumps",
                  "a small cat", "berlin and paris"] * 2, object)
    y = np.array([0, 1, 1, 0, 0, 1] * 2)
    probe = tf.constant(["the lazy dog"])
    ids = py_batch(exp.tok, ["the lazy dog"])
    before = enc(ids)["pooled_output"].numpy()
    hist = model.fit(x, y, batch_size=6, epochs=6, verbose=0, shuffle=False)
    loss = hist.history["loss"]
    assert loss[-1] < loss[0] * 0.7, loss
    after = enc(ids)["pooled_output"].numpy()
    # the encoder itself was fine-tuned (its SavedModel variables changed)...
    assert np.abs(after - before).max() > 1e-3
    np.testing.assert_allclose(enc(pre(probe))["pooled_output"].numpy(), after, atol=1e-6)
    # ...and the exported file on disk is untouched
    fresh = tf.saved_model.load(exp["enc"])
    np.testing.assert_allclose(fresh(ids)["pooled_output"].numpy(), before, atol=1e-6)


def test_stock_tfsmlayer_and_rebuilt_keras_model(exp):
    from bert_tf.export import load_as_keras_model
    # stock keras.layers.TFSMLayer with its default endpoint ("serve") on an end-to-end export
    layer = keras.layers.TFSMLayer(exp["classification"])
    out = layer(tf.constant(SENTENCES))
    want = reference(exp, "classification", "serving_default", {"text": SENTENCES})
    assert_outputs({k: v.numpy() for k, v in out.items()}, want, "TFSMLayer")
    sig = keras.layers.TFSMLayer(exp["fill_mask"], call_endpoint="__call__")
    got = {k: v.numpy() for k, v in sig(tf.constant(MASKED[:2])).items()}
    assert_outputs(got, reference(exp, "fill_mask", "serving_default", {"text": MASKED[:2]}),
                   "TFSMLayer fill_mask")
    # our own Keras model back, with the exported weights (dropout fine-tuning route)
    model, meta = load_as_keras_model(exp["classification"])
    assert isinstance(model, bm.BertClassifier) and meta["labels"] == LABELS
    ids = py_batch(exp.tok, SENTENCES)
    np.testing.assert_allclose(np_out(model(ids, training=False))["logits"], want["logits"],
                               atol=1e-5)
    assert len(model.trainable_weights) == len(exp.models["classification"].trainable_weights)
    # Rebuilt from the Keras config the export carries: the same config, dropout_rate included.
    as_json = lambda c: json.loads(json.dumps(c))
    assert as_json(model.get_config()) == as_json(exp.models["classification"].get_config())
    assert meta["keras_config"]["config"]["dropout_rate"] == 0.1
    assert meta["keras_config"]["config"]["encoder"]["class_name"] == "BertEncoder"
    # An encoder export comes back as the BertEncoder alone, with its outputs.
    encoder, meta = load_as_keras_model(exp["enc"])
    assert type(encoder).__name__ == "BertEncoder" and meta["kind"] == "encoder"
    np.testing.assert_allclose(
        encoder(ids, training=False)["pooled_output"].numpy(),
        exp.models["fill_mask"].encoder(ids, training=False)["pooled_output"].numpy(), atol=1e-6)


def test_an_export_traces_the_model_once_per_graph_it_needs(exp):
    """Saving retraces every saved function in its own context; an export traces the model
    once per `training` value it saves, inside the save only (export_encoder's module does
    not trace before saving), and a signature's second input shape shares the first's trace
    (counted before: 9 encoder traces for an encoder export with `mlm`, then 4 (outside and
    inside the save), 2 for a fill-mask export without warm-up requests). Counted while the
    module's exports were built (Exports.traces): exporting them again here cost ~15 s."""
    exp["enc"], exp["fill_mask"]
    # `mlm` shares the encoder's traces
    assert sorted(exp.traces["enc"]) == [False, True], exp.traces["enc"]
    # text ids [None, SEQ] (serving_default, serving_pairs) and predict_ids' [None, None];
    # export_for_serving's warm-up requests only run the preprocessor
    assert exp.traces["fill_mask"] == [False], exp.traces["fill_mask"]
    pretrainer = exp.models["fill_mask"]
    loaded = tf.saved_model.load(exp["enc"])
    ids = py_batch(exp.tok, SENTENCES[:2])
    want = pretrainer.encoder({k: tf.constant(v) for k, v in ids.items()})["pooled_output"]
    np.testing.assert_allclose(loaded.signatures["serving_default"](
        **{k: tf.constant(v) for k, v in ids.items()})["pooled_output"], want, atol=1e-5)
