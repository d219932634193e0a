"""Training and evaluating on packed records (issue 33): no cross-contamination (per-sequence
outputs, losses and gradients equal the unpacked computation), eval_results.txt equal to the
unpacked records', a packed run that learns, resumes after SIGTERM and exports, the XLA step,
gradient accumulation and two replicas. Tiny config, CPU."""
import re
import shutil
import signal

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertError
from bert_tf.modeling.models import BertPretrainer, build_model
from bert_tf.pretraining_data import sequence_packing as packing
from bert_tf.pretraining import pretraining
from bert_tf.training.distribute import get_strategy
from bert_tf.pretraining.preflight import check_pretraining_files
from conftest import TWO_CPUS, make_pretraining_instance, tiny_bert_config

SEQ, PRED, PACK = 32, 5, 3
NUM_SEQUENCES = 48


def _arrays(features):
    return {k: np.asarray(v, np.float32 if k == "masked_lm_weights" else np.int64)
            for k, v in features.items()}


def _write_packed(path, rows):
    with tf.io.TFRecordWriter(str(path)) as w:
        for row in rows:
            w.write(packing.encode_row(row))


def _write_short(path, num, longest=20, seed=0):
    """Ordinary records of S=32 holding sequences of 7..`longest` tokens; their features."""
    rng = np.random.default_rng(seed)
    feats = []
    with tf.io.TFRecordWriter(str(path)) as w:
        for _ in range(num):
            f = make_pretraining_instance(rng, longest, PRED, 64, min_len=7)
            for k in ("input_ids", "input_mask", "segment_ids"):
                f[k] = f[k] + [0] * (SEQ - longest)
            w.write(tf.train.Example(features=tf.train.Features(feature={
                k: tf.train.Feature(float_list=tf.train.FloatList(value=v))
                if k == "masked_lm_weights" else
                tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                for k, v in f.items()})).SerializeToString())
            feats.append(f)
    return feats


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """48 short sequences (7..20 tokens) as ordinary records of 32 and packed up to 3 a row."""
    d = tmp_path_factory.mktemp("packed")
    feats = _write_short(d / "unpacked.tfrecord", NUM_SEQUENCES)
    rows = packing.pack_examples([_arrays(f) for f in feats], SEQ, PACK, PRED, shuffle=False)
    _write_packed(d / "packed.tfrecord", rows)
    assert len(rows) < NUM_SEQUENCES * 0.6  # it did pack
    return dict(dir=d, feats=feats, rows=rows, unpacked=str(d / "unpacked.tfrecord"),
                packed=str(d / "packed.tfrecord"))


def _batch(rows):
    batch = {k: tf.constant(np.stack([r[k] for r in rows])) for k in rows[0]}
    out = {"input_word_ids": batch["input_ids"], "input_mask": batch["input_mask"],
           "input_type_ids": batch["segment_ids"],
           "masked_lm_positions": batch["masked_lm_positions"],
           "masked_lm_ids": tf.cast(batch["masked_lm_ids"], tf.int32),
           "masked_lm_weights": batch["masked_lm_weights"]}
    if "positions" in batch:  # the sequence index under its own name, the mask 0/1
        out.update(input_positions=batch["positions"], input_sequence_index=batch["input_mask"],
                   input_mask=tf.cast(batch["input_mask"] > 0, tf.int64),
                   next_sentence_positions=batch["next_sentence_positions"],
                   next_sentence_labels=tf.cast(batch["next_sentence_labels"], tf.int32),
                   next_sentence_weights=batch["next_sentence_weights"])
    else:
        out["next_sentence_labels"] = tf.cast(batch["next_sentence_labels"][:, 0], tf.int32)
    return out


def _loss_and_grads(model, task, batch, inputs):
    with tf.GradientTape() as tape:
        outputs = model({k: batch[k] for k in inputs}, training=False)
        loss, stats = pretraining.pretraining_losses(
            outputs, batch, *task.normalizers(batch).values())
    return outputs, loss, stats, tape.gradient(loss, model.trainable_variables)


def test_packed_equals_unpacked_per_sequence(data):
    """Same sequences, same weights: packed rows give the unpacked rows' per-sequence encoder
    outputs, pooled [CLS] vectors, MLM/NSP losses and gradients; the ordinary padding mask or
    positions 0..S-1 would not."""
    rows = data["rows"]
    singles = [s for r in rows for s in packing.unpack_example(r, SEQ, PRED)]
    assert sorted(s["input_ids"].tolist() for s in singles) == sorted(
        _arrays(f)["input_ids"].tolist() for f in data["feats"])
    model = build_model(BertPretrainer.from_bert_config(tiny_bert_config()))
    task = pretraining.PretrainingTask(model.bert_config, None)
    packed, unpacked = _batch(rows), _batch(singles)
    inputs = pretraining.MODEL_INPUTS
    out_u, loss_u, stats_u, grads_u = _loss_and_grads(model, task, unpacked, inputs)
    out_p, loss_p, stats_p, grads_p = _loss_and_grads(
        model, task, packed, inputs + ("input_positions", "input_sequence_index",
                                       "next_sentence_positions"))

    # Per-sequence encoder outputs and the pooler on each [CLS].
    seq_u, seq_p = out_u["sequence_output"].numpy(), out_p["sequence_output"].numpy()
    pooled_u, pooled_p = out_u["pooled_output"].numpy(), out_p["pooled_output"].numpy()
    mask = packed["input_sequence_index"].numpy()
    i = 0
    for r in range(len(rows)):
        for k in range(int(packed["next_sentence_weights"][r].numpy().sum())):
            where = np.flatnonzero(mask[r] == k + 1)
            np.testing.assert_allclose(seq_p[r, where], seq_u[i, :len(where)], atol=2e-5)
            np.testing.assert_allclose(pooled_p[r, k], pooled_u[i], atol=2e-5)
            i += 1
    assert i == NUM_SEQUENCES
    # The losses (the unpacked run's meaning: means over masked tokens / real sequences) ...
    for key in ("mlm_loss_sum", "mlm_weight", "mlm_correct", "nsp_loss_sum", "nsp_correct",
                "examples"):
        np.testing.assert_allclose(stats_p[key].numpy(), stats_u[key].numpy(), rtol=1e-5,
                                   err_msg=key)
    assert stats_p["examples"].numpy() == NUM_SEQUENCES
    np.testing.assert_allclose(loss_p.numpy(), loss_u.numpy(), rtol=1e-6)
    # ... and the gradients of every variable.
    for v, gp, gu in zip(model.trainable_variables, grads_p, grads_u):
        gp, gu = tf.convert_to_tensor(gp).numpy(), tf.convert_to_tensor(gu).numpy()
        np.testing.assert_allclose(gp, gu, rtol=1e-4, atol=1e-6, err_msg=v.path)
        assert np.abs(gu).max() > 0, v.path

    # The test can fail: one sequence index lets a pack's sequences see each other,
    # positions 0..S-1 shift every sequence after the first.
    def worst(**changes):
        out = model({**{k: packed[k] for k in inputs}, "input_positions": packed[
            "input_positions"], "input_sequence_index": packed["input_sequence_index"],
            "next_sentence_positions": packed["next_sentence_positions"],
            **changes}, training=False)["sequence_output"].numpy()
        return np.abs(out[mask > 0] - seq_p[mask > 0]).max()

    assert worst(input_sequence_index=tf.cast(mask > 0, tf.int64)) > 1e-2
    arange = tf.broadcast_to(tf.range(SEQ, dtype=tf.int64)[None], mask.shape)
    assert worst(input_positions=arange) > 1e-2


def test_preflight_detects_packed_records_and_padding(data, tmp_path, caplog):
    caplog.set_level("INFO")
    info = check_pretraining_files([data["packed"]], SEQ, PRED, 64, 2, records_per_file=100)
    assert info["packed"] and info["shape"] == (SEQ, PRED + PACK, PACK)
    real = sum(int((r["input_mask"] > 0).sum()) for r in data["rows"])
    assert info["padding"] == pytest.approx(1 - real / (SEQ * len(data["rows"])))
    assert "pre-flight: packed records (up to 3 sequences per pack" in caplog.text
    plain = check_pretraining_files([data["unpacked"]], SEQ, PRED, records_per_file=100)
    assert not plain["packed"] and plain["padding"] > 2 * info["padding"]
    with pytest.raises(BertError, match="pass files of one kind"):
        check_pretraining_files([data["packed"], data["unpacked"]], SEQ, PRED)
    with pytest.raises(BertError, match=r"not --max_seq_length=64: pass --max_seq_length=32"):
        check_pretraining_files([data["packed"]], 64, PRED)


def test_eval_results_equal_the_unpacked_records(data, tmp_path, monkeypatch):
    """--do_eval on the packed records writes the unpacked records' eval_results.txt (one eval
    batch each: `loss` is the mean of the per-batch losses, as in the original)."""
    from bert_tf.commands import run_pretraining as command
    config = tmp_path / "bert_config.json"
    tiny_bert_config(num_hidden_layers=1).to_json_file(str(config))
    # Weights from a few training steps (so that accuracies are not all 0), checkpointed.
    trainer = _trainer(tmp_path, "train", num_train_steps=8, learning_rate=3e-3)
    trainer.train(trainer.task.dataset_fn(data["packed"], True))
    # In process: the command's app_main (pre-flight, hand-off, run_pretraining), its options
    # given instead of parsed (test_training's CLI test runs the command in a process of its
    # own); one device, as the command's child process (one CPU device) had.
    for name, batch in (("unpacked", NUM_SEQUENCES), ("packed", len(data["rows"]))):
        shutil.copytree(tmp_path / "train", tmp_path / name)  # eval resumes its checkpoint
        options = pretraining.PretrainingOptions(
            bert_config_file=str(config), max_seq_length=32, max_predictions_per_seq=5,
            max_eval_steps=10, input_file=data[name], do_eval=True, eval_batch_size=batch,
            output_dir=str(tmp_path / name), strategy="one_device", progress=False)
        monkeypatch.setattr(command.script_flags, "options_from_flags", lambda cls: options)
        command.app_main([])  # a BertError would exit with its one line

    def read(name):
        lines = (tmp_path / name / "eval_results.txt").read_text().splitlines()
        return {k: float(v) for k, v in (ln.split(" = ") for ln in lines)}

    got, want = read("packed"), read("unpacked")
    assert sorted(got) == sorted(pretraining.EVAL_KEYS)
    assert want["masked_lm_accuracy"] > 0
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=1e-5), key


# ---- in-process trainers: XLA, accumulation, mixed precision, two replicas -----------------

def _trainer(tmp_path, name, strategy=None, packed=True, **kw):
    base = dict(output_dir=str(tmp_path / name), max_seq_length=SEQ,
                max_predictions_per_seq=PRED, train_batch_size=4, learning_rate=1e-3,
                num_train_steps=10, num_warmup_steps=1, seed=3, progress=False,
                strategy="one_device", iterations_per_loop=1, save_checkpoints_steps=100)
    base.update(kw)
    trainer = pretraining.make_trainer(tiny_bert_config(num_hidden_layers=1),
                                       pretraining.PretrainingOptions(**base), strategy, packed)
    return trainer


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """Three steps of one device, float32, global batch 8 packs: their losses."""
    return _steps(_trainer(tmp_path_factory.mktemp("ref"), "ref", train_batch_size=8),
                  data["packed"], 3)


def _steps(trainer, pattern, n=3):
    data_fn = trainer.task.dataset_fn(pattern, True)
    iterator = trainer.test_iterator = iter(trainer.distribute(data_fn, training=True))
    return [pretraining.summarize(
        {k: float(v) for k, v in trainer.train_loop(iterator, 1).items()}, 1)["loss"]
        for _ in range(n)]


def test_packed_dataset_has_static_shapes_and_the_model_inputs(data, tmp_path):
    trainer = _trainer(tmp_path, "shapes")
    ds = trainer.task.dataset_fn(data["packed"], True)(tf.distribute.InputContext(), 4, 1, 0)
    specs = ds.element_spec
    assert all(s.shape.is_fully_defined() and s.shape[0] == 4 for s in specs.values())
    assert specs["input_positions"].shape == (4, SEQ)
    assert specs["masked_lm_positions"].shape == (4, PRED + PACK)
    assert specs["next_sentence_weights"].shape == (4, PACK)
    assert set(trainer.task.model_inputs) == set(pretraining.MODEL_INPUTS) | {
        "input_positions", "input_sequence_index", "next_sentence_positions"}
    batch = next(iter(ds))  # the sequence index under its own name, input_mask 0/1
    assert set(np.unique(batch["input_mask"])) == {0, 1}
    np.testing.assert_array_equal(batch["input_mask"], batch["input_sequence_index"] > 0)
    assert batch["input_sequence_index"].numpy().max() > 1
    with pytest.raises(BertError, match=r"^--dynamic_masking: packed records were masked when "
                                        r"they were made \(bert-pack-pretraining-data"):
        _trainer(tmp_path, "dyn", dynamic_masking=True, mask_id=3).task.dataset_fn(data["packed"], True)(
            tf.distribute.InputContext(), 4, 1, 0)


def test_pipeline_names_the_sequence_index_at_the_source(data):
    """pretraining_dataset itself yields input_sequence_index and a 0/1 input_mask (with or
    without its pre-flight), and records of another kind than `packed=` are a one-line error."""
    from bert_tf.pretraining.input_pipeline import pretraining_dataset
    rows = data["rows"][:4]
    for preflight in (True, False):
        ds = pretraining_dataset(data["packed"], 4, SEQ, PRED, False, preflight=preflight,
                                 packed=True)
        batch = next(iter(ds))
        np.testing.assert_array_equal(batch["input_sequence_index"],
                                      np.stack([r["input_mask"] for r in rows]))
        np.testing.assert_array_equal(batch["input_mask"],
                                      np.stack([r["input_mask"] > 0 for r in rows]))
    with pytest.raises(BertError, match=r"^--input_file=.*packed\.tfrecord: packed records, "
                                        r"but this run was set up for ordinary \(unpacked\) ones"):
        pretraining_dataset(data["packed"], 4, SEQ, PRED, False, packed=False)
    with pytest.raises(BertError, match=r"^--input_file=.*unpacked\.tfrecord: ordinary "
                                        r"\(unpacked\) records, but this run was set up for "
                                        r"packed ones"):
        pretraining_dataset(data["unpacked"], 4, SEQ, PRED, False, packed=True)


def test_xla_compiled_step_on_packed_batches(data, tmp_path, reference):
    # The default suite's pre-training step under XLA (test_xla's unpacked case is slow).
    from test_xla import _xla_compiled
    xla = _trainer(tmp_path, "xla", train_batch_size=8, jit_compile=True)
    got = _steps(xla, data["packed"])
    assert all(np.isfinite(got)) and got[0] != got[1]
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-4)
    assert _xla_compiled(xla)


def test_accumulation_and_mixed_precision_on_packed_batches(data, tmp_path, reference):
    from bert_tf.training.distribute import set_mixed_precision
    got = _steps(_trainer(tmp_path, "k2", train_batch_size=8, grad_accum_steps=2),
                 data["packed"])
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-5)
    try:
        fp16 = _steps(_trainer(tmp_path, "fp16", train_batch_size=8, mixed_precision="float16"),
                      data["packed"])
    finally:
        set_mixed_precision("none")
    np.testing.assert_allclose(fp16, reference, atol=0.05)


@pytest.mark.skipif(not TWO_CPUS, reason="TensorFlow was initialised before conftest split the CPU")
def test_two_replicas_match_one_device_on_packed_batches(data, tmp_path, reference):
    two = _trainer(tmp_path, "two", get_strategy("mirrored"), train_batch_size=8)
    assert two.strategy.num_replicas_in_sync == 2
    got = _steps(two, data["packed"])
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-4)


# ---- run_pretraining.py on packed records: learns, SIGTERM/resume, export -------------------

# Slow (~65 s on 2 idle cores): the default suite covers its parts elsewhere: SIGTERM ending a
# loop after its step (test_preemption, in process), packed records training, resuming to equal
# numbers and exporting (test_two_phase's packed phase). A SIGTERM to a run_pretraining.py
# process, its exit 75 and the same command resuming: slow tests only (here and test_preemption).
@pytest.mark.slow
def test_packed_run_learns_resumes_after_sigterm_and_exports(data):
    from bert_tf.training.preemption import PREEMPTED_EXIT_CODE
    from test_preemption import _finish, _log, _start, _wait_for
    steps = 30
    d = data["dir"]
    config = d / "bert_config.json"
    tiny_bert_config(dropout=0.1).to_json_file(str(config))
    setup = dict(dir=d, args=[f"--bert_config_file={config}", f"--input_file={data['packed']}",
                              "--do_train"])
    flags = dict(num_train_steps=steps)
    ref = _start(setup, d / "reference", **flags)
    assert _finish(ref) == 0, _log(ref)[-3000:]
    text = _log(ref)
    assert "pre-flight: packed records (up to 3 sequences per pack" in text
    losses = [float(x) for x in re.findall(rf"step \d+/{steps} loss=([0-9.]+)", text)]
    assert len(losses) >= 10 and np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.3, losses
    rates = [float(x) for x in re.findall(r"sequences/s=([0-9.]+)", text)]
    assert rates and min(rates) > 0
    reference = (d / "reference" / "eval_results.txt").read_text()
    assert reference.startswith(f"global_step = {steps}\n")
    # The export is the ordinary serving model (packing is a training format only).
    export = re.search(r"exported the encoder to (\S+)", text).group(1)
    sig = tf.saved_model.load(export).signatures["serving_default"]
    assert set(sig.structured_input_signature[1]) == {"input_word_ids", "input_mask",
                                                      "input_type_ids"}
    # SIGTERM mid-run, then the same command: the uninterrupted run's numbers.
    out = d / "run"
    proc = _start(setup, out, **flags)
    _wait_for([proc], lambda: f"step 5/{steps}" in _log(proc))
    proc.send_signal(signal.SIGTERM)
    assert _finish(proc, 120) == PREEMPTED_EXIT_CODE, _log(proc)[-3000:]
    step = int(tf.train.latest_checkpoint(str(out)).rsplit("-", 1)[1])
    assert 5 <= step < steps and not (out / "eval_results.txt").exists()
    again = _start(setup, out, **flags)
    assert _finish(again) == 0, _log(again)[-3000:]
    assert (out / "eval_results.txt").read_text() == reference
