"""Reading a model runs none of its code (issue 44), the rest of the audit: HF pickles are
refused (and a typo is "not found", not a pickle), names and links in metadata stay inside the
source, casing fields are typed, a preprocessor's casing is read as data (keras_metadata.pb,
the ops `tokenize` reaches) or left undecided, never guessed wrong, and no module under
bert_tf/ runs a SavedModel or unpickles except the three runners on the project's own exports.
The SavedModel marker tests: tests/test_untrusted_sources.py.
"""
import ast
import dataclasses
import json
import os
import pathlib
import pickle
import shutil

import pytest
import tensorflow as tf

import bert_tf
from bert_tf import BertError
from bert_tf.convert import formats, handoff
from bert_tf.convert.__main__ import convert
from test_convert_encoder_only import write_bert_model_dir
from test_untrusted_sources import one_line

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    base = tmp_path_factory.mktemp("untrusted_paths")
    hf = write_bert_model_dir(base)
    return dict(base=base, hf=hf, vocab=os.path.join(hf, "vocab.txt"))


def _copy(src_dir, dst):
    shutil.copytree(src_dir, dst)
    return str(dst)


def _pretraining_options():
    from bert_tf.pretraining.options import PretrainingOptions
    return PretrainingOptions()


class _Unpickled:
    """Unpickling this writes a file: the proof that nothing unpickles."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("weights", ["pytorch_model.bin", "tf_model.h5"])
def test_hf_folder_without_safetensors_is_refused(src, weights, tmp_path):
    d = tmp_path / "hf"
    d.mkdir()
    for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(src["hf"], name), d / name)
    marker = tmp_path / "unpickled.txt"
    (d / weights).write_bytes(pickle.dumps(_Unpickled(str(marker))))
    for path in (str(d), str(d / weights)):
        reads = [bert_tf.from_pretrained,
                 lambda p: convert("auto", p, "tf1", str(tmp_path / "out")),
                 lambda p: convert("hf", p, "tf1", str(tmp_path / "out")),
                 lambda p: handoff.hand_off(
                     dataclasses.replace(_pretraining_options(), init_checkpoint=p), set())]
        for read in reads:
            with pytest.raises(BertError) as e:
                read(path)
            one_line(e, weights, "safetensors only", "save_pretrained(dir, "
                     "safe_serialization=True)")
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_paths_inside_metadata_stay_inside_the_source(src, tmp_path):
    # a `checkpoint` file naming a checkpoint elsewhere
    outside = tmp_path / "elsewhere"
    tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(outside / "ckpt-1"))
    d = tmp_path / "run"
    d.mkdir()
    (d / "checkpoint").write_text(f'model_checkpoint_path: "{outside / "ckpt-1"}"\n')
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(str(d))
    one_line(e, "outside this directory")
    (d / "checkpoint").write_text('model_checkpoint_path: "../elsewhere/ckpt-1"\n')
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(str(d))
    one_line(e, "outside this directory")
    # a sharded safetensors index naming a shard outside the folder
    hf = _copy(src["hf"], tmp_path / "hf")
    os.rename(os.path.join(hf, "model.safetensors"), tmp_path / "shard.safetensors")
    (pathlib.Path(hf) / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"embeddings.word_embeddings.weight": "../shard.safetensors"}}))
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(hf)
    one_line(e, "'../shard.safetensors'", "refusing to read outside")
    # a sentence-transformers Pooling module outside the model
    st = _copy(src["hf"], tmp_path / "st")
    (pathlib.Path(st) / "modules.json").write_text(json.dumps(
        [{"idx": 1, "name": "1", "path": "/etc", "type": "sentence_transformers.models.Pooling"}]))
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(st, task="embeddings")
    one_line(e, "'/etc'", "refusing to read outside")


def test_a_missing_path_is_not_found_not_a_pickle(tmp_path):
    for path in ("/nonexistent/typo_model.bin", str(tmp_path / "typo" / "pytorch_model.bin")):
        with pytest.raises(BertError) as e:
            formats.detect(path)
        msg = one_line(e, "not found")
        assert "holds" not in msg and "pickle" not in msg


def test_a_moved_run_folder_reads_its_own_checkpoint(tmp_path):
    """common._inside: a `checkpoint` file naming a stale absolute path (the folder was
    copied or moved) reads the checkpoint of that name inside the folder, never the old one."""
    from bert_tf.convert import common
    old, new = tmp_path / "old" / "run", tmp_path / "new" / "run"
    tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(old / "ckpt-7"))
    (old / "checkpoint").write_text(f'model_checkpoint_path: "{old / "ckpt-7"}"\n')
    shutil.copytree(old, new)
    tf.train.Checkpoint(v=tf.Variable(2.0)).write(str(new / "ckpt-7"))  # the copy trained on
    got = common.resolve_prefix(str(new))
    assert got == str(new / "ckpt-7")
    assert tf.train.load_checkpoint(got).get_tensor("v/.ATTRIBUTES/VARIABLE_VALUE") == 2.0
    shutil.rmtree(tmp_path / "old")  # moved: the stale path names nothing
    assert common.resolve_prefix(str(new)) == str(new / "ckpt-7")


def test_casing_fields_must_be_json_bools(src, tmp_path):
    from bert_tf.convert import bert_tf_export, hf, keras_hub
    d = pathlib.Path(_copy(src["hf"], tmp_path / "hf"))
    for value, want in ((False, (False, False)), (None, (True, True)), (True, (True, True))):
        (d / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": value}))
        assert hf.hf_casing(str(d)) == want
    (d / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": "false"}))
    for read in (hf.hf_casing, bert_tf.from_pretrained):
        with pytest.raises(BertError) as e:
            read(str(d))
        one_line(e, "tokenizer_config.json: do_lower_case is 'false', expected true, false")
    (d / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True,
                                                         "strip_accents": 0}))
    with pytest.raises(BertError) as e:
        hf.hf_casing(str(d))
    one_line(e, "strip_accents is 0")
    export = tmp_path / "export"
    (export / "assets.extra").mkdir(parents=True)
    assert bert_tf_export.export_vocab(str(export), {"do_lower_case": False}) == (
        None, (False, False))
    with pytest.raises(BertError) as e:
        bert_tf_export.export_vocab(str(export), {"do_lower_case": "false"})
    one_line(e, "bert_tf_export.json: do_lower_case is 'false'")
    preset = tmp_path / "preset"
    preset.mkdir()
    (preset / "tokenizer.json").write_text(json.dumps({"config": {"lowercase": "true"}}))
    with pytest.raises(BertError) as e:
        keras_hub.keras_hub_casing(str(preset))
    one_line(e, "tokenizer.json: lowercase is 'true'")


def test_safetensors_header_is_bounded(src, monkeypatch):
    from bert_tf.convert import hf
    path = os.path.join(src["hf"], "model.safetensors")
    assert "embeddings.word_embeddings.weight" in hf.hf_tensor_names(path)
    monkeypatch.setattr(hf, "MAX_HEADER_BYTES", 64)
    with pytest.raises(BertError) as e:
        hf.hf_tensor_names(path)
    one_line(e, "not a readable safetensors file", "over safetensors'")


def _saved(tmp_path, name, module):
    path = str(tmp_path / name)
    tf.saved_model.save(module, path)
    return path


def test_object_graph_ids_and_list_names_are_checked(tmp_path):
    from tensorflow.core.protobuf import saved_model_pb2
    from bert_tf.convert.saved_model_data import SavedModelData
    root = tf.Module()
    root.items = [tf.Variable(1.0, name="a"), tf.Variable(2.0, name="b")]
    path = _saved(tmp_path, "sm", root)
    sm = SavedModelData(path)
    items = sm.node(["items"])
    assert [sm.variable_name(i) for i in sm.items(items)] == ["a", "b"]
    pb = os.path.join(path, "saved_model.pb")
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(open(pb, "rb").read())
    children = proto.meta_graphs[0].object_graph_def.nodes[items].children
    [second] = [c for c in children if c.local_name == "1"]
    second.local_name = "\u00b2"  # a digit to str.isdigit, no list index
    open(pb, "wb").write(proto.SerializeToString())
    assert [sm.variable_name(i) for i in SavedModelData(path).items(items)] == ["a"]
    second.node_id = -1
    open(pb, "wb").write(proto.SerializeToString())
    with pytest.raises(BertError) as e:
        SavedModelData(path)
    one_line(e, "refers to missing objects")


# ---- a TF Hub preprocessor's casing, read as data ----------------------------------------

def _preprocessor(tmp_path, name, vocab, lower_op=False, normalizer=False):
    """A tiny preprocessor-like SavedModel: one vocab asset, a WordPiece `tokenize` (lower-
    casing with StringLower when `lower_op`, normalised with FastBertNormalize when
    `normalizer`), and an unused function holding a CaseFoldUTF8 op."""
    import tensorflow_text as text
    module = tf.Module()
    module.vocab = tf.saved_model.Asset(vocab)
    module.table = tf.lookup.StaticVocabularyTable(tf.lookup.TextFileInitializer(
        module.vocab, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
        tf.lookup.TextFileIndex.LINE_NUMBER), 1)
    wordpiece = text.WordpieceTokenizer(module.table, token_out_type=tf.int64)
    spec = [tf.TensorSpec([None], tf.string)]

    @tf.function(input_signature=spec)
    def tokenize(s):
        if lower_op:
            s = tf.strings.lower(s)
        if normalizer:
            s = text.FastBertNormalizer(lower_case_nfd_strip_accents=False).normalize(s)
        return wordpiece.tokenize(tf.strings.split(s)).merge_dims(1, 2).to_tensor()
    module.tokenize = tokenize
    module.unused = tf.function(text.case_fold_utf8, input_signature=spec)
    return _saved(tmp_path, name, module)


def _keras_metadata(path, *layers):
    """keras_metadata.pb as tf_keras writes it (TF's own proto class), one node per
    (class_name, config)."""
    from tensorflow.python.keras.protobuf import saved_metadata_pb2
    meta = saved_metadata_pb2.SavedMetadata()
    for i, (class_name, config) in enumerate(layers):
        meta.nodes.add(node_id=i + 1, node_path=f"root.layer_{i}", identifier="_tf_keras_layer",
                       metadata=json.dumps({"class_name": class_name, "config": config}))
    pathlib.Path(path, "keras_metadata.pb").write_bytes(meta.SerializeToString())


def test_preprocessor_casing_is_data_never_a_guess(src, tmp_path):
    from bert_tf.convert import tfhub
    cased = _preprocessor(tmp_path, "cased", src["vocab"])
    lower = _preprocessor(tmp_path, "lower", src["vocab"], lower_op=True)
    normalized = _preprocessor(tmp_path, "normalized", src["vocab"], normalizer=True)
    # the graph: only what `tokenize` reaches counts (the unused CaseFoldUTF8 does not)
    vocab, got = tfhub.read_tfhub_preprocessor(cased)
    assert got is False and open(vocab).read() == open(src["vocab"]).read()
    assert tfhub.read_tfhub_preprocessor(lower)[1] is True  # what the test would catch
    assert tfhub.read_tfhub_preprocessor(normalized)[1] is None  # a data setting: undecided
    # keras_metadata.pb (Model Garden's tf_keras exports) decides over the graph
    for path, class_name, setting in ((cased, "Text>BertTokenizer", True),
                                      (lower, "Text>FastWordpieceBertTokenizer", False),
                                      (normalized, "BertTokenizer", False)):
        _keras_metadata(path, ("Dense", {"lower_case": not setting}),
                        (class_name, {"vocab_file": "x", "lower_case": setting}))
        assert tfhub.read_tfhub_preprocessor(path)[1] is setting, path
    # Model Garden's export_tfhub_lib saves its BertTokenizer without a config: the ops decide
    for path, want in ((cased, False), (lower, True)):
        _keras_metadata(path, ("BertTokenizer", {"layer was saved without config": True}))
        assert tfhub.read_tfhub_preprocessor(path)[1] is want, path
    _keras_metadata(lower, ("Text>BertTokenizer", {"lower_case": "false"}))
    assert tfhub.read_tfhub_preprocessor(lower)[1] is None  # unclear: nothing else trusted
    pathlib.Path(cased, "keras_metadata.pb").write_bytes(b"\x0a\xff\xff")
    with pytest.raises(BertError) as e:
        tfhub.read_tfhub_preprocessor(cased)
    one_line(e, "keras_metadata.pb: truncated or not Keras metadata")


# ---- no module runs a SavedModel or unpickles, except the project's own runners -----------

# file -> names it may use, with why: each runs a SavedModel bert_tf itself wrote
RUNNERS = {
    "bert_tf/demo_predict.py": {"keras.layers.TFSMLayer"},  # the demo's own exports
    # load_as_keras_layer: documented for exports you trust (the compatibility guide)
    "bert_tf/export/keras_loading.py": {"keras.layers.TFSMLayer"},
}
_RUNS = ("saved_model.load", "hub.load", "KerasLayer", "TFSMLayer", "pickle.load",
         "pickle.loads", "torch.load", "saved_model.loader.load", "load_v2", "load_partial",
         "enable_unsafe_deserialization")


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _uses(tree):
    """(dotted name, keywords or None) of every name, attribute and call in `tree`: a name
    that runs code is caught whether it is called, subclassed or passed around."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield _dotted(node.func), node.keywords
        elif isinstance(node, (ast.Attribute, ast.Name)):
            yield _dotted(node), None


def test_no_module_runs_a_savedmodel_or_unpickles():
    files = sorted((ROOT / "bert_tf").rglob("*.py"))
    assert len(files) > 50
    seen = {}
    for f in files:
        rel = str(f.relative_to(ROOT))
        tree = ast.parse(f.read_text())
        for name, keywords in _uses(tree):
            if name is None:
                continue
            where = f"{rel}: {name}"
            if any(name == r or name.endswith("." + r) for r in _RUNS):
                assert name in RUNNERS.get(rel, ()), where
                seen.setdefault(rel, set()).add(name)
            if keywords and name.split(".")[-1] in ("load_model", "deserialize_keras_object"):
                unsafe = [k for k in keywords if k.arg == "safe_mode"
                          and not (isinstance(k.value, ast.Constant) and k.value.value is True)]
                assert not unsafe, where
            if keywords and name.split(".")[-1] == "load":  # np.load(allow_pickle=True)
                assert not [k for k in keywords if k.arg == "allow_pickle" and not (
                    isinstance(k.value, ast.Constant) and k.value.value is False)], where
        imported = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in n.names} | {n.module for n in ast.walk(tree)
                                         if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & {"tensorflow_hub", "pickle", "torch", "dill", "cloudpickle",
                               "tf_keras"}, rel
    assert seen == RUNNERS  # the allowlist names no runner that is gone


def test_the_import_check_can_fail():
    tree = ast.parse("import keras\nclass L(keras.layers.TFSMLayer): pass\n"
                     "f = tf.saved_model.load\nkeras.config.enable_unsafe_deserialization()\n")
    names = {n for n, _ in _uses(tree) if n and any(n.endswith(r) for r in _RUNS)}
    assert names >= {"keras.layers.TFSMLayer", "tf.saved_model.load",
                     "keras.config.enable_unsafe_deserialization"}
