"""bfloat16 (issue 43 B): `--mixed_precision=auto`'s rule with faked hardware facts, and, with
bf16 forced on whatever the CPU, a plain and a packed pre-training run (the packed one under
XLA; slow) that learns, evaluates, resumes to the uninterrupted run's weights and exports float32
outputs within the documented tolerance of the float32 model's (same weights).

Every test leaves the global Keras dtype policy as it found it (autouse fixture)."""
import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.models import BertPretrainer, build_model
from bert_tf.pretraining_data import sequence_packing as packing
from bert_tf.training import distribute, precision
from bert_tf.pretraining import pretraining
from conftest import make_pretraining_instance, tiny_bert_config

SEQ, PRED, PACK = 32, 5, 3
# The export of a bf16-trained model computes in bf16: its float32 outputs differ from the
# float32 model's (same weights) by bf16 rounding. Documented in docs/tpu.md ("bfloat16").
EXPORT_RTOL = 0.05  # max |bf16 - fp32| / max |fp32|, per output


@pytest.fixture(autouse=True)
def keep_dtype_policy():
    previous = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(previous)


# ---- auto: the rule, with faked cpuinfo / device details -----------------------------------

CPUINFO = ("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx2 {extra}\n"
           "bugs\t\t: spectre_v1\n\nprocessor\t: 1\nflags\t\t: fpu\n")


@pytest.mark.parametrize("extra, want", [
    ("avx512f avx512_bf16", {"avx512f", "avx512_bf16"}), ("amx_bf16 amx_tile", {"amx_bf16",
                                                                                "amx_tile"}),
    ("", set())])
def test_cpu_flags_read_the_first_flags_line(tmp_path, extra, want):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO.format(extra=extra))
    assert precision.cpu_flags(str(path)) == {"fpu", "sse2", "avx2"} | want
    assert precision.cpu_flags(str(tmp_path / "missing")) == set()  # not Linux: no flags


@pytest.mark.parametrize("kind, caps, flags, onednn, want, reason", [
    ("tpu", (), (), True, "bfloat16", "TPU (bf16 matrix units)"),
    ("gpu", [(8, 0)], (), True, "bfloat16",
     "GPU compute capability 8.0 >= 8.0 (bf16 tensor cores)"),
    ("gpu", [(9, 0), (7, 5)], (), True, "none",
     "GPU compute capability 9.0, 7.5 < 8.0 (no bf16 tensor cores)"),
    ("gpu", [], (), True, "none", "GPU compute capability unknown < 8.0 (no bf16 tensor cores)"),
    ("cpu", (), {"avx2", "avx512_bf16"}, True, "bfloat16", "CPU has avx512_bf16"),
    ("cpu", (), {"amx_bf16", "avx512_bf16"}, True, "bfloat16", "CPU has amx_bf16"),
    ("cpu", (), {"avx512_bf16"}, False, "none",
     "CPU has avx512_bf16 but TF_ENABLE_ONEDNN_OPTS=0 (bf16 would be emulated)"),
    ("cpu", (), {"avx2", "avx512f"}, True, "none",
     "CPU without avx512_bf16 or AMX (bf16 would be emulated, slower)"),
])
def test_auto_rule(kind, caps, flags, onednn, want, reason):
    assert precision.choose(kind, caps, flags, onednn) == (want, reason)


class _FakeGpu:
    device_type = "GPU"


@pytest.mark.parametrize("facts, policy, line", [
    (dict(kind="cpu", flags={"avx512_bf16"}), "mixed_bfloat16",
     "--mixed_precision=auto: bfloat16 (CPU has avx512_bf16)"),
    (dict(kind="cpu", flags={"avx2"}), "float32",
     "--mixed_precision=auto: float32 (CPU without avx512_bf16 or AMX (bf16 would be emulated, "
     "slower))"),
    (dict(kind="gpu", caps={"compute_capability": (8, 6)}), "mixed_bfloat16",
     "--mixed_precision=auto: bfloat16 (GPU compute capability 8.6 >= 8.0 (bf16 tensor cores))"),
    (dict(kind="gpu", caps={"compute_capability": (7, 0)}), "float32",
     "--mixed_precision=auto: float32 (GPU compute capability 7.0 < 8.0 (no bf16 tensor "
     "cores))"),
])
def test_auto_sets_the_policy_and_logs_why(monkeypatch, caplog, tmp_path, facts, policy, line):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"flags\t: {' '.join(facts.get('flags', ()))}\n")
    monkeypatch.setattr(precision, "CPUINFO", str(cpuinfo))  # cpu_flags() reads it
    monkeypatch.setattr(precision, "device_kind", lambda strategy=None: facts["kind"])
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: [_FakeGpu()] if kind == "GPU" else [])
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda device: facts.get("caps", {}))
    with caplog.at_level(logging.INFO, logger="bert_tf"):
        assert distribute.set_mixed_precision("auto") == policy
    assert keras.config.dtype_policy().name == policy
    assert line in caplog.messages


class _FakePhysicalGpu:
    device_type = "GPU"

    def __init__(self, index):
        self.name = f"/physical_device:GPU:{index}"


def test_auto_asks_only_the_strategys_gpus(monkeypatch):
    """A strategy on GPU:1 (sm 8.0) picks bf16 though GPU:0 (sm 7.0) is visible too."""
    caps = {"/physical_device:GPU:0": (7, 0), "/physical_device:GPU:1": (8, 0)}
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: [_FakePhysicalGpu(0), _FakePhysicalGpu(1)]
                        if kind == "GPU" else [])
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda device: {"compute_capability": caps[device.name]})

    class Strategy:
        class extended:
            worker_devices = ("/job:localhost/replica:0/task:0/device:GPU:1",)
    assert precision.gpu_capabilities(Strategy) == [(8, 0)]
    assert precision.gpu_capabilities() == [(7, 0), (8, 0)]  # no strategy: all visible
    assert precision.resolve("auto", Strategy)[0] == "bfloat16"


@pytest.mark.parametrize("flags, policy", [("avx512_bf16", "mixed_bfloat16"),
                                           ("avx2", "float32")])
def test_a_trainer_with_auto_on_a_cpu_strategy(monkeypatch, tmp_path, flags, policy):
    """The Trainer resolves auto with its strategy's (CPU) facts; the model follows."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"flags\t: fpu {flags}\n")
    monkeypatch.setattr(precision, "CPUINFO", str(cpuinfo))
    monkeypatch.setattr(precision, "_onednn_on", lambda: True)
    monkeypatch.setattr(tf.config, "list_physical_devices",  # a GPU the CPU run must not ask
                        lambda kind=None: [_FakePhysicalGpu(0)] if kind == "GPU" else [])
    options = pretraining.PretrainingOptions(output_dir=str(tmp_path / "out"),
                                             mixed_precision="auto", progress=False,
                                             max_seq_length=32)
    trainer = pretraining.make_trainer(tiny_bert_config(num_hidden_layers=1), options,
                                       strategy=tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert keras.config.dtype_policy().name == policy
    assert trainer.model.encoder.compute_dtype == policy.replace("mixed_", "")


def test_auto_on_this_machine_and_the_strategys_devices(monkeypatch):
    """The strategy's devices decide; unknown values are one line; others pass through."""
    cpu = distribute.get_strategy("one_device")
    if not tf.config.list_logical_devices("GPU"):
        assert precision.device_kind(cpu) == "cpu"
    want = precision.choose("cpu", (), precision.cpu_flags(), precision._onednn_on())
    if precision.device_kind(cpu) == "cpu":
        assert precision.resolve("auto", cpu) == want
    assert precision.resolve("bfloat16", cpu) == ("bfloat16", None)
    from bert_tf import BertError
    with pytest.raises(BertError, match="^--mixed_precision: unknown value 'fp8'; expected one "
                       "of none, float16, bfloat16, auto$"):
        distribute.set_mixed_precision("fp8")
    assert distribute.set_mixed_precision("none") == "float32"
    # The command's pre-flight says it before TF makes a strategy, even with nothing to read.
    from bert_tf.pretraining.preflight_run import check_run
    with pytest.raises(BertError, match="^--mixed_precision: unknown value 'fp8'; expected one "
                       "of none, float16, bfloat16, auto$"):
        check_run(pretraining.PretrainingOptions(mixed_precision="fp8"))
    check_run(pretraining.PretrainingOptions(mixed_precision="AUTO"))  # nothing to check


# ---- bf16 forced on: pre-training trains, evaluates, resumes, exports ----------------------

def _feature(k, v):
    if k == "masked_lm_weights":
        return tf.train.Feature(float_list=tf.train.FloatList(value=v))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=v))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """64 short sequences (7..20 tokens): plain records of 32, and packed up to 3 a row."""
    d = tmp_path_factory.mktemp("bf16")
    rng = np.random.default_rng(0)
    feats = []
    with tf.io.TFRecordWriter(str(d / "plain.tfrecord")) as w:
        for _ in range(64):
            f = make_pretraining_instance(rng, 20, PRED, 64, min_len=7)
            for k in ("input_ids", "input_mask", "segment_ids"):
                f[k] = f[k] + [0] * (SEQ - 20)
            w.write(tf.train.Example(features=tf.train.Features(
                feature={k: _feature(k, v) for k, v in f.items()})).SerializeToString())
            feats.append({k: np.asarray(v, np.float32 if k == "masked_lm_weights" else np.int64)
                          for k, v in f.items()})
    rows = packing.pack_examples(feats, SEQ, PACK, PRED, shuffle=False)
    with tf.io.TFRecordWriter(str(d / "packed.tfrecord")) as w:
        for row in rows:
            w.write(packing.encode_row(row))
    return {"dir": d, "plain": str(d / "plain.tfrecord"), "packed": str(d / "packed.tfrecord")}


def _options(out, pattern, jit, steps, **kw):
    base = dict(output_dir=str(out), input_file=pattern, max_seq_length=SEQ,
                max_predictions_per_seq=PRED, train_batch_size=8, eval_batch_size=8,
                learning_rate=2e-3, num_train_steps=steps, num_warmup_steps=2,
                save_checkpoints_steps=15, iterations_per_loop=3, max_eval_steps=4, seed=5,
                progress=False, strategy="one_device", jit_compile=jit,
                mixed_precision="bfloat16")
    return pretraining.PretrainingOptions(**{**base, **kw})


def _weights(model):
    return [np.array(w) for w in model.get_weights()]


@pytest.mark.parametrize("kind, jit", [
    ("plain", False),
    # (packed training, resume and export: test_two_phase; packed XLA: test_packed_training)
    # slow: test_bf16_pretraining_trains_evaluates_resumes_and_exports[plain-False]
    pytest.param("packed", True, marks=pytest.mark.slow)])
def test_bf16_pretraining_trains_evaluates_resumes_and_exports(data, tmp_path, kind, jit):
    steps, config = 30, tiny_bert_config(num_hidden_layers=1)
    pattern, packed = data[kind], kind == "packed"
    # train (checkpoints at 15 and 30), export, evaluate: run_pretraining, as the command
    o = _options(tmp_path / "full", pattern, jit, steps, do_train=True, do_eval=True,
                 export_dir=str(tmp_path / "export"))
    o.bert_config_file = str(tmp_path / "bert_config.json")
    config.to_json_file(o.bert_config_file)
    out = pretraining.run_pretraining(o)
    losses = [m["loss"] for m in out["train"]]
    assert len(losses) == steps // 3 and all(np.isfinite(losses))
    assert losses[-1] < losses[0] - 0.5, losses  # it learns
    ev = out["eval"]
    assert np.isfinite(ev["loss"]) and ev["global_step"] == steps
    assert ev["loss"] < losses[0] - 0.5 and ev["masked_lm_accuracy"] > 0.1, ev  # chance: 1/60
    # resume: the run's step-15 checkpoint alone in a new output_dir, trained on to the end
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    for f in (tmp_path / "full").glob("model.ckpt-15.*"):
        (resumed / f.name).write_bytes(f.read_bytes())
    (resumed / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-15"\n'
                                        'all_model_checkpoint_paths: "model.ckpt-15"\n')
    second = pretraining.make_trainer(config, _options(resumed, pattern, jit, steps),
                                      packed=packed)
    assert second.restore() == "resumed" and second.step == 15
    assert second.model.encoder.compute_dtype == "bfloat16"
    assert {v.dtype for v in second.model.trainable_weights} == {"float32"}
    second.train(second.task.dataset_fn(pattern, True))
    full = pretraining.make_trainer(config, _options(tmp_path / "full", pattern, jit, steps),
                                    packed=packed)
    assert full.restore() == "resumed" and full.step == steps
    for a, b in zip(_weights(second.model), _weights(full.model)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    if not packed:  # a bf16 checkpoint resumes under --mixed_precision=none: float32 compute
        fp32 = pretraining.make_trainer(config, _options(
            tmp_path / "full", pattern, jit, steps, mixed_precision="none"), packed=packed)
        assert fp32.restore() == "resumed" and fp32.step == steps
        assert fp32.model.encoder.compute_dtype == "float32"
        for a, b in zip(_weights(fp32.model), _weights(full.model)):
            np.testing.assert_array_equal(a, b)
    _check_export(tmp_path / "export", full.model, config)


def _check_export(export_dir, trained, config):
    """The export's signature: float32 outputs, within EXPORT_RTOL of the float32 model."""
    keras.config.set_dtype_policy("float32")
    fp32 = build_model(BertPretrainer(BertEncoder.from_bert_config(config, name="encoder")))
    fp32.set_weights(trained.get_weights())
    assert fp32.encoder.compute_dtype == "float32"
    rng = np.random.default_rng(1)
    lengths = np.array([32, 20, 9, 14])
    mask = (np.arange(SEQ)[None] < lengths[:, None]).astype(np.int32)
    inputs = {"input_word_ids": (rng.integers(4, 64, (4, SEQ)) * mask).astype(np.int32),
              "input_mask": mask,
              "input_type_ids": ((np.arange(SEQ)[None] >= lengths[:, None] // 2) * mask
                                 ).astype(np.int32)}
    positions = np.stack([rng.choice(n, PRED, replace=False) for n in lengths]).astype(np.int32)
    loaded = tf.saved_model.load(str(export_dir))
    sig = loaded.signatures["serving_default"]
    assert {s.dtype for s in tf.nest.flatten(sig.structured_outputs)} == {tf.float32}
    got = {k: v.numpy() for k, v in sig(**inputs).items()}
    got["mlm_logits"] = loaded.mlm({**inputs, "masked_lm_positions": positions})[
        "mlm_logits"].numpy()
    want = fp32.encoder({k: tf.constant(v) for k, v in inputs.items()})
    want = {"pooled_output": want["pooled_output"].numpy(),
            "sequence_output": want["sequence_output"].numpy() * mask[..., None],
            "mlm_logits": fp32({**inputs, "masked_lm_positions": positions})[
                "mlm_logits"].numpy()}
    for key, w in want.items():
        assert got[key].dtype == np.float32
        err = np.max(np.abs(got[key] - w)) / np.max(np.abs(w))
        assert 1e-5 < err < EXPORT_RTOL, (key, err)  # bf16 inside, float32 at the edges


# ---- fine-tuning (run_classifier's task): trains in bf16, exports float32 text-in outputs ---

# The one default test of a fine-tuned model trained in bf16 and exported float32.
def test_bf16_classifier_trains_and_exports_float32(tmp_path):
    from bert_tf.tasks import classifier, finetune
    from bert_tf.tokenization import FullTokenizer
    from test_xla import FINETUNE, VOCAB
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    cfg = classifier.ClassifierConfig(
        output_dir=str(tmp_path / "out"), max_seq_length=16, train_batch_size=4,
        learning_rate=1e-3, seed=3, progress=False, strategy="one_device",
        mixed_precision="bfloat16", vocab_file=str(vocab))
    bert_config = tiny_bert_config(vocab_size=len(VOCAB), num_hidden_layers=1)
    task, arrays = FINETUNE["classifier"](FullTokenizer(str(vocab)), cfg, bert_config,
                                          np.random.default_rng(0))
    trainer = finetune.make_trainer(task, cfg)
    assert trainer.model.dtype_policy.compute_dtype == "bfloat16"
    start = _weights(trainer.model)
    loss = finetune.train(trainer, arrays, 6, 1)
    assert np.isfinite(loss)
    assert max(np.max(np.abs(a - b)) for a, b in zip(_weights(trainer.model), start)) > 1e-4
    export_dir = trainer.export(str(tmp_path / "export"))
    keras.config.set_dtype_policy("float32")
    fp32 = task.build_model()
    fp32.set_weights(trainer.model.get_weights())
    ids = {k: arrays[k].astype(np.int32) for k in ("input_word_ids", "input_mask",
                                                   "input_type_ids")}
    got = tf.saved_model.load(export_dir).signatures["predict_ids"](**ids)
    assert got["logits"].dtype == tf.float32 and got["probabilities"].dtype == tf.float32
    want = fp32({k: tf.constant(v) for k, v in ids.items()})["logits"].numpy()
    err = np.max(np.abs(got["logits"].numpy() - want)) / np.max(np.abs(want))
    assert 1e-5 < err < EXPORT_RTOL, err
