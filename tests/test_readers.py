"""Every reader reads what it claims (issue 39): a TF Hub encoder in the TF Serving layout
(`<dir>/<version>/`) or under `<dir>/encoder/`, a `.safetensors` without config.json given a
config; `detect` never raises; nothing read is kept between calls; source.py imports no
format."""
import ast
import os
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf

import bert_tf
from bert_tf import BertError
from bert_tf.convert import bert_tf_export, checkpoints, formats, handoff, interop, tfhub
from bert_tf.convert.__main__ import convert
from test_convert_encoder_only import write_bert_model_dir

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _hub_names(tf1_weights, heads):
    """Model Garden BertEncoder names and layouts (TF Hub's) of TF1-named encoder weights,
    written from the names `bert_tf.convert.tfhub` reads."""
    embeddings = {ours: theirs for theirs, ours in tfhub._EMBEDDINGS.items()}
    block = {ours: theirs for theirs, ours in tfhub._BLOCK.items()}
    out = {}
    for name, value in tf1_weights.items():
        if name in embeddings:
            out[embeddings[name]] = value
            continue
        _, _, layer, *rest, leaf = name.split("/")
        theirs = block["/".join(rest)]
        h = value.shape[0]
        if theirs.startswith("self_attention/") and theirs != "self_attention/attention_output":
            value = value.reshape((h, heads, -1) if leaf == "kernel" else (heads, -1))
        elif theirs == "self_attention/attention_output" and leaf == "kernel":
            value = value.reshape(heads, -1, h)
        out[f"transformer/{layer}/{theirs}/{leaf}"] = value
    return out


def write_hub_encoder(export_dir, encoder, vocab_file):
    """A TF Hub-style encoder SavedModel (Model Garden names, `variables`, `vocab_file`,
    `do_lower_case`) holding `encoder`'s weights."""
    heads = encoder.bert_config.num_attention_heads
    root = tf.Module()
    root.hub_variables = [tf.Variable(v, name=n) for n, v in
                          _hub_names(interop.get_weights(encoder), heads).items()]
    root.vocab_file = tf.saved_model.Asset(vocab_file)
    root.do_lower_case = tf.Variable(True, trainable=False)
    tf.saved_model.save(root, str(export_dir))
    # TF Hub's exports list their weights as `variables` (a tf.Module property cannot be set)
    loaded = tf.saved_model.load(str(export_dir))
    loaded.variables = list(loaded.hub_variables)
    tf.saved_model.save(loaded, str(export_dir))


def weights_of(model):
    return {k: np.asarray(v) for k, v in interop.get_weights(model).items()}


def assert_same(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    base = tmp_path_factory.mktemp("readers")
    hf_dir = write_bert_model_dir(base)
    encoder = bert_tf.from_pretrained(hf_dir)
    served = base / "served"  # TF Serving layout: the newest version (numerically) is read
    write_hub_encoder(served / "10", encoder, os.path.join(hf_dir, "vocab.txt"))
    older = bert_tf.modeling.encoder.BertEncoder.from_bert_config(encoder.bert_config)
    bert_tf.modeling.models.build_model(older)  # other weights: "9" sorts after "10" as text
    write_hub_encoder(served / "9", older, os.path.join(hf_dir, "vocab.txt"))
    (served / "3").mkdir()  # an older version, not a SavedModel: never looked at
    pair = base / "pair"
    shutil.copytree(served / "10", pair / "encoder")
    return dict(hf=hf_dir, encoder=encoder, served=str(served), pair=str(pair), base=base,
                config=str(base / "bert_config.json"))


@pytest.mark.parametrize("where", ["served", "pair"])
def test_tf_hub_encoder_in_serving_layout_or_under_encoder_is_read(src, where, tmp_path):
    want = weights_of(src["encoder"])
    fmt, found = formats.detect(src[where])
    assert (fmt.name, found) == ("tfhub", os.path.join(src[where], "10" if where == "served"
                                                       else "encoder"))
    assert bert_tf_export.FORMAT.detect(src[where]) is None  # no metadata: not ours
    assert_same(weights_of(bert_tf.from_pretrained(src[where])), want)
    for from_format in ("auto", "tfhub"):
        out = str(tmp_path / f"hf-{from_format}")
        convert(from_format, src[where], "hf", out)
        assert_same(weights_of(bert_tf.from_pretrained(out)), want)
    # --init_checkpoint: config, vocab and casing handed off; the Source read is the one loaded
    from bert_tf.pretraining.options import PretrainingOptions
    options, read = handoff.hand_off(PretrainingOptions(init_checkpoint=src[where]), set())
    assert options.bert_config_file == src[where] and read.format == "tfhub"
    assert options.vocab_file.endswith("vocab.txt") and options.do_lower_case is True
    model = bert_tf.modeling.encoder.BertEncoder.from_bert_config(
        formats.read_config(options.bert_config_file))
    formats.load_checkpoint(model, read)
    assert_same(weights_of(model), want)


def test_a_rewritten_source_is_read_again(src, tmp_path):
    # A notebook hands a checkpoint to a command, rewrites it in place and reads it again.
    from bert_tf.pretraining.options import PretrainingOptions
    path = tmp_path / "hub"
    write_hub_encoder(path, src["encoder"], os.path.join(src["hf"], "vocab.txt"))
    handoff.fill_options(PretrainingOptions(init_checkpoint=str(path)), set())
    other = bert_tf.modeling.encoder.BertEncoder.from_bert_config(src["encoder"].bert_config)
    bert_tf.modeling.models.build_model(other)  # fresh random weights
    shutil.rmtree(path)
    write_hub_encoder(path, other, os.path.join(src["hf"], "vocab.txt"))
    reloaded = bert_tf.modeling.encoder.BertEncoder.from_bert_config(other.bert_config)
    bert_tf.modeling.models.build_model(reloaded)
    checkpoints.load_checkpoint(reloaded, str(path))
    assert_same(weights_of(reloaded), weights_of(other))
    assert_same(weights_of(bert_tf.from_pretrained(str(path))), weights_of(other))
    assert not hasattr(formats, "_REMEMBERED")


def test_safetensors_without_config_json_reads_with_bert_config_file(src, tmp_path):
    want = weights_of(src["encoder"])
    alone = tmp_path / "alone"  # a folder and a bare file, neither with a config.json
    alone.mkdir()
    shutil.copy(os.path.join(src["hf"], "model.safetensors"), alone / "model.safetensors")
    shutil.copy(os.path.join(src["hf"], "vocab.txt"), alone / "vocab.txt")
    for path in (str(alone), str(alone / "model.safetensors")):
        assert_same(weights_of(bert_tf.from_pretrained(path, bert_config_file=src["config"])),
                    want)
        with pytest.raises(BertError) as e:
            bert_tf.from_pretrained(path)
        assert str(e.value) == (f"{path}: no config.json in {alone}: pass bert_config_file=... "
                                f"(and vocab_file=... for text input)")
        with pytest.raises(BertError, match=r"pass --bert_config_file \(and --vocab_file"):
            convert("auto", path, "tf1", str(tmp_path / "out"))
        out = str(tmp_path / "out")
        convert("hf", path, "tf1", out, bert_config_file=src["config"])
        assert_same(weights_of(bert_tf.from_pretrained(out)), want)
        shutil.rmtree(out)
        # --init_checkpoint: the flag gives the config; without it, a line that names the flag
        values, taken, read = handoff.resolve(path, {"bert_config_file": src["config"]},
                                              {"bert_config_file"})
        assert read.bert_config.hidden_size == 16 and "bert_config_file" not in values
        with pytest.raises(BertError) as e:
            handoff.resolve(path, {"bert_config_file": None}, set())
        assert str(e.value) == (f"--init_checkpoint={path}: no config.json in {alone}: pass "
                                f"--bert_config_file (and --vocab_file for text input)")
        # a bad --bert_config_file is that file's error, not the checkpoint's
        missing = str(tmp_path / "no_such_config.json")
        with pytest.raises(BertError) as e:
            handoff.resolve(path, {"bert_config_file": missing}, {"bert_config_file"})
        assert "--init_checkpoint" not in str(e.value) and missing in str(e.value)


def test_detect_never_raises(tmp_path):
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "bad.index").write_bytes(b"\x00not an index" * 10)
    (garbage / "bad.data-00000-of-00001").write_bytes(b"junk")
    (garbage / "checkpoint").write_text("model_checkpoint_path: {{{")
    (garbage / "1").write_text("a version that is a file")
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "saved_model.pb").write_bytes(b"not a proto")
    (tmp_path / "dir.keras").mkdir()
    (tmp_path / "x.safetensors").write_bytes(b"\xff" * 7)
    paths = ["", "\x00", "/no/such/path", str(tmp_path / "missing.keras"),
             str(tmp_path / "missing"), str(garbage), str(garbage / "bad"),
             str(garbage / "bad.index"), str(saved), str(tmp_path / "dir.keras"),
             str(tmp_path / "x.safetensors"), str(garbage / "1")]
    for fmt in formats.FORMATS:
        for path in paths:
            found = fmt.detect(path)
            assert found is None or isinstance(found, str), (fmt.name, path)
    # What no format takes is explained by formats.detect, in one line.
    with pytest.raises(BertError) as e:
        formats.detect(str(garbage / "bad"))
    assert str(e.value).startswith(f"{garbage / 'bad'}: ") and "\n" not in str(e.value)
    with pytest.raises(BertError, match="file not found"):
        formats.read(str(tmp_path / "missing.keras"))


def test_source_py_imports_no_format():
    convert_dir = ROOT / "bert_tf" / "convert"
    format_modules = {f.stem for f in convert_dir.glob("*.py")
                      if "\nFORMAT = Format(" in f.read_text()}
    assert {"tf1", "hf", "tfhub", "native", "bert_tf_export"} <= format_modules
    imported = set()
    for node in ast.walk(ast.parse((convert_dir / "source.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[-1])
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            imported.update(a.name.split(".")[-1] for a in node.names)
    assert not imported & format_modules, sorted(imported & format_modules)
    # no format imports another to exclude it from detection
    mg = (convert_dir / "model_garden_format.py").read_text()
    assert "native" not in mg
