"""Two-phase pre-training in one command (issue 43 A, bert_tf.pretraining.phase_plan / phases): the
learning rate at every step is the documented formula for both schedules and never 0 in phase
2; a re-run from the boundary or from inside phase 2 ends with the uninterrupted run's
checkpoint, bit for bit (dropout on); phase 2's wrong records, eval records of the other kind and changed phase flags of a run that
trains are one line with nothing written, while export- and eval-only runs need no phase flags;
the record holds no float64 and one-phase checkpoints have none; the two-command way keeps a
fresh optimizer. Tiny config (one layer: every run traces both phases' steps), CPU; phase
1 at S=16, phase 2 at S=32, packed in one phase and plain in the other (both ways round).
Evaluation (a trace and a pipeline a phase) runs in the continue schedule's runs only."""
import dataclasses
import json
import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertError
from bert_tf.pretraining_data import sequence_packing as packing
from bert_tf.pretraining import phase_plan, pretraining
from bert_tf.pretraining.options import PretrainingOptions
from conftest import make_pretraining_instance, tiny_bert_config, write_pretraining_records

N1, N2 = 3, 2
CONFIG = dict(dropout=0.1, num_hidden_layers=1)  # dropout: resume must restore it too


def _write_packed(path, seq, pack, pred, num, longest, seed):
    """Short sequences (7..`longest` tokens) packed up to `pack` a row of `seq` tokens."""
    rng = np.random.default_rng(seed)
    examples = []
    for _ in range(num):
        f = make_pretraining_instance(rng, longest, pred, 64, min_len=7)
        for k in ("input_ids", "input_mask", "segment_ids"):
            f[k] = f[k] + [0] * (seq - longest)
        examples.append({k: np.asarray(v, np.float32 if k == "masked_lm_weights" else np.int64)
                         for k, v in f.items()})
    rows = packing.pack_examples(examples, seq, pack, pred, shuffle=False)
    with tf.io.TFRecordWriter(str(path)) as w:
        for row in rows:
            w.write(packing.encode_row(row))
    return len(rows)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("two_phase")
    for i in range(2):
        write_pretraining_records(d / f"p1-plain-{i}.tfrecord", 48, seq_len=16, max_pred=3, seed=i)
    write_pretraining_records(d / "p2.tfrecord", 48, seq_len=32, max_pred=5, seed=5)
    assert _write_packed(d / "p1-packed.tfrecord", 16, 2, 3, 96, 8, 3) < 96
    assert _write_packed(d / "p2-packed.tfrecord", 32, 3, 5, 96, 14, 4) < 96
    config = d / "bert_config.json"
    tiny_bert_config(**CONFIG).to_json_file(str(config))
    return d


def _options(data, out, **kw):
    base = dict(bert_config_file=str(data / "bert_config.json"),
                input_file=str(data / "p1-plain-*.tfrecord"), output_dir=str(out), do_train=True,
                max_seq_length=16, max_predictions_per_seq=3, train_batch_size=4,
                num_train_steps=N1, num_warmup_steps=2, learning_rate=1e-3,
                phase2_input_file=str(data / "p2-packed.tfrecord"), phase2_max_seq_length=32,
                phase2_max_predictions_per_seq=5, phase2_train_batch_size=2,
                phase2_num_train_steps=N2, eval_batch_size=4, max_eval_steps=1,
                iterations_per_loop=1, save_checkpoints_steps=1, keep_checkpoint_max=10,
                seed=7, progress=False)
    base.update(kw)
    return PretrainingOptions(**base)


@pytest.fixture(scope="module")
def exports():
    """Exports are recorded, not written (their own tests write them): [max_seq_length]."""
    from bert_tf.pretraining import pretraining_export
    seen = []

    def record(model, export_dir, options, init_source=None):
        seen.append(options.max_seq_length)
        return export_dir
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pretraining_export, "export_pretrained", record)
        yield seen


def _run(options, exports):
    return pretraining.run_pretraining(options)


def _checkpoint(out, step):
    reader = tf.train.load_checkpoint(os.path.join(str(out), f"model.ckpt-{step}"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if not k.startswith(("save_counter", "_CHECKPOINTABLE_OBJECT_GRAPH"))}


def _resume_from(src, dst, step, eval_rows=None):
    """An output_dir holding only `src`'s checkpoint of `step` (as after a stop there)."""
    os.makedirs(dst)
    for name in os.listdir(src):
        if name.startswith(f"model.ckpt-{step}."):
            shutil.copy(os.path.join(src, name), dst)
    (dst / "checkpoint").write_text(f'model_checkpoint_path: "model.ckpt-{step}"\n'
                                    f'all_model_checkpoint_paths: "model.ckpt-{step}"\n')
    if eval_rows:
        (dst / "eval_results.txt").write_text("".join(f"{r}\n" for r in eval_rows))


@pytest.fixture(scope="module")
def continued(data, tmp_path_factory, exports):
    """The uninterrupted default run: plain phase 1, packed phase 2, --do_eval."""
    out = tmp_path_factory.mktemp("continue") / "out"
    options = _options(data, out, do_eval=True)
    return options, out, _run(options, exports)


def _lr_matches_formula(options, history):
    # A loop's learning_rate is the rate of the next update (global step = its `step`).
    steps = [m["step"] for m in history]
    assert steps == list(range(1, N1 + N2 + 1))
    for m in history[:-1]:
        want = phase_plan.learning_rate_at(options, m["step"])
        assert m["learning_rate"] == pytest.approx(want, rel=1e-6, abs=1e-12), m["step"]
    phase2 = [m["learning_rate"] for m in history[N1 - 1:-1]]  # updates N1 .. N1 + N2 - 1
    assert len(phase2) == N2 and min(phase2) > 0, phase2


def test_continue_schedule_eval_rows_phase_record_and_export(continued, exports, caplog):
    options, out, result = continued
    _lr_matches_formula(options, result["train"])
    lrs = [m["learning_rate"] for m in result["train"]]
    # One warm-up (2 steps), then one decay over both phases' 5 steps.
    np.testing.assert_allclose(lrs, [5e-4, 1e-3 * 3 / 5, 1e-3 * 2 / 5, 1e-3 / 5, 0.0],
                               rtol=1e-6)
    rows = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text()
                .splitlines())
    assert sorted(rows) == sorted(f"phase{n}/{k}" for n in (1, 2) for k in pretraining.EVAL_KEYS)
    assert (rows["phase1/global_step"], rows["phase2/global_step"]) == ("3", "5")
    assert result["eval_phases"][2]["masked_lm_accuracy"] == float(
        rows["phase2/masked_lm_accuracy"]) == result["eval"]["masked_lm_accuracy"]
    # The checkpoints say the phase: the boundary's is still phase 1 (the switch comes after).
    phase = [int(_checkpoint(out, s)["phases/phase/.ATTRIBUTES/VARIABLE_VALUE"])
             for s in range(1, 6)]
    assert phase == [1, 1, 1, 2, 2]
    assert exports[-1] == 32  # exported up to phase 2's length
    # The record holds no float64 (TPUs have none): int64 phase/origin, the flags as JSON.
    dtypes = tf.train.load_checkpoint(str(out / "model.ckpt-5")).get_variable_to_dtype_map()
    record = {k.split("/")[1]: v for k, v in dtypes.items() if k.startswith("phases/")}
    assert record == {"phase": tf.int64, "optimizer_origin": tf.int64, "flags": tf.string}
    assert tf.float64 not in dtypes.values()
    flags = json.loads(_checkpoint(out, 5)["phases/flags/.ATTRIBUTES/VARIABLE_VALUE"])
    assert flags == phase_plan.recorded_values(options)
    assert (flags["phase2_max_seq_length"], flags["phase2_train_batch_size"]) == (32, 2)


def test_export_and_eval_only_need_no_phase_flags(data, continued, exports, tmp_path):
    """A finished two-phase run exports (at phase 2's length, from the record) and evaluates
    without its phase flags; training on without them is still refused."""
    options, out, _ = continued
    plain = dict(phase2_input_file=None, phase2_train_batch_size=None,
                 phase2_num_train_steps=None, do_train=False, do_eval=False)
    before = sorted(os.listdir(out))
    result = _run(dataclasses.replace(options, export_dir=str(tmp_path / "export"), **plain),
                  exports)
    assert result["export_dir"] == str(tmp_path / "export") and exports[-1] == 32
    _resume_from(out, tmp_path / "copy", N1 + N2)
    ev = _run(dataclasses.replace(options, output_dir=str(tmp_path / "copy"),
                                  **{**plain, "do_eval": True}), exports)
    assert ev["eval"]["global_step"] == N1 + N2 and ev["eval_phases"] is None
    assert ev["train"] == [] and sorted(os.listdir(out)) == before
    with pytest.raises(BertError, match="^--phase2_input_file: the checkpoint in .* is of a "
                       "two-phase run"):
        _run(dataclasses.replace(options, output_dir=str(tmp_path / "copy"),
                                 **{**plain, "do_train": True}), exports)


def _same_end(out, again, full, result, step):
    """The re-run from `step` trained the rest with the uninterrupted run's losses and ended
    with its checkpoint (every variable, bit for bit) and eval_results.txt (if it wrote one)."""
    assert [m["step"] for m in result["train"]] == list(range(step + 1, N1 + N2 + 1))
    assert [m["loss"] for m in result["train"]] == [m["loss"] for m in full["train"][step:]]
    got, want = _checkpoint(again, N1 + N2), _checkpoint(out, N1 + N2)
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    evaluated = (out / "eval_results.txt").exists()
    assert (again / "eval_results.txt").exists() == evaluated
    if evaluated:
        assert ((again / "eval_results.txt").read_text() ==
                (out / "eval_results.txt").read_text())


def test_resume_at_the_boundary_equals_the_uninterrupted_run(continued, exports, tmp_path,
                                                             caplog):
    """Stopped right after phase 1's last checkpoint: the re-run evaluates phase 1, switches
    and trains phase 2 as the uninterrupted run did."""
    options, out, full = continued
    _resume_from(out, tmp_path / "out", N1)
    with caplog.at_level(logging.INFO, logger="bert_tf"):
        result = _run(dataclasses.replace(options, output_dir=str(tmp_path / "out")), exports)
    assert f"resumed in phase 1 at global step {N1} of 5" in caplog.text
    assert "resumes at the boundary (step 3): phase 2 next" in caplog.text  # pre-flight line
    _same_end(out, tmp_path / "out", full, result, N1)


def test_resume_inside_phase_2_keeps_phase_1_rows(continued, exports, tmp_path, caplog):
    """Stopped inside phase 2 after phase 1's eval rows were written: the re-run does not
    evaluate phase 1 again and adds phase 2's rows to them, as the uninterrupted run wrote."""
    options, out, full = continued
    rows = [r for r in (out / "eval_results.txt").read_text().splitlines()
            if r.startswith("phase1/")]  # what the stopped run had written
    _resume_from(out, tmp_path / "out", N1 + 1, rows)
    with caplog.at_level(logging.INFO, logger="bert_tf"):
        result = _run(dataclasses.replace(options, output_dir=str(tmp_path / "out")), exports)
    assert f"resumed in phase 2 at global step {N1 + 1} of 5" in caplog.text
    assert sorted(result["eval_phases"]) == [2]
    _same_end(out, tmp_path / "out", full, result, N1 + 1)


def test_restart_schedule_with_a_fresh_optimizer_resumes_inside_phase_2(data, exports,
                                                                        tmp_path, caplog):
    """Packed phase 1, plain phase 2; phase 2 warms up again from 1e-3 * 1/2, never 0, with a
    fresh optimizer; a re-run from inside phase 2 (the optimizer's step restored as 1, the
    schedule's origin from the phase record) ends as the uninterrupted run. No eval: the
    continue schedule's resumes check the eval rows."""
    options = _options(data, tmp_path / "run", input_file=str(data / "p1-packed.tfrecord"),
                       phase2_input_file=str(data / "p2.tfrecord"), phase2_lr_schedule="restart",
                       phase2_learning_rate=1e-3, phase2_num_warmup_steps=1,
                       phase2_fresh_optimizer=True)
    full = _run(options, exports)
    _lr_matches_formula(options, full["train"])
    assert [m["learning_rate"] for m in full["train"]][N1 - 1:-1] == pytest.approx([1e-3, 5e-4])
    last = _checkpoint(tmp_path / "run", 5)
    assert int(last["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"]) == N2  # phase 2's
    assert int(last["phases/optimizer_origin/.ATTRIBUTES/VARIABLE_VALUE"]) == N1
    _resume_from(tmp_path / "run", tmp_path / "again", N1 + 1)
    with caplog.at_level(logging.INFO, logger="bert_tf"):
        again = _run(dataclasses.replace(options, output_dir=str(tmp_path / "again")), exports)
    assert f"resumed in phase 2 at global step {N1 + 1} of 5" in caplog.text
    _same_end(tmp_path / "run", tmp_path / "again", full, again, N1 + 1)
    # From the boundary: the restored phase-1 optimizer is zeroed at the switch, as it was.
    _resume_from(tmp_path / "run", tmp_path / "boundary", N1)
    boundary = _run(dataclasses.replace(options, output_dir=str(tmp_path / "boundary")),
                    exports)
    _same_end(tmp_path / "run", tmp_path / "boundary", full, boundary, N1)


def test_bad_phase_2_input_is_one_line_and_writes_nothing(data, exports, tmp_path):
    from bert_tf.pretraining.preflight_run import check_run
    out = tmp_path / "out"
    p2 = str(data / "p2.tfrecord")
    cases = [
        (dict(phase2_max_seq_length=128),
         "--phase2_max_seq_length: 128 exceeds the config's max_position_embeddings 64"),
        (dict(phase2_input_file=p2, phase2_max_seq_length=48),
         f"--phase2_input_file {p2}: record 0: records have input_ids of length 32, not "
         "--phase2_max_seq_length=48: pass --phase2_max_seq_length=32 or regenerate the data"),
        (dict(phase2_learning_rate=1e-4),
         "--phase2_learning_rate: only with --phase2_lr_schedule=restart (continue keeps "
         "phase 1's one schedule over both phases)"),
        (dict(phase2_input_file=None),  # phase 2's flags without its data
         "--phase2_train_batch_size: needs --phase2_input_file (phase 2's data)"),
        (dict(do_eval=True, phase2_eval_input_file=p2),  # plain eval for packed training
         f"--phase2_eval_input_file={p2}: ordinary (unpacked) records, but --phase2_input_file "
         "holds packed ones: evaluate phase 2 on records of its training data's kind"),
        (dict(do_eval=True, eval_input_file=str(data / "p1-packed.tfrecord"),
              phase2_input_file=None, phase2_train_batch_size=None,
              phase2_num_train_steps=None),  # one phase, the same
         f"--eval_input_file={data / 'p1-packed.tfrecord'}: packed records, but --input_file "
         "holds ordinary (unpacked) ones: evaluate the run on records of its training data's "
         "kind"),
    ]
    for kw, want in cases:
        options = _options(data, out, **kw)
        for check in (check_run, lambda o: _run(o, exports)):  # the command's, the library's
            with pytest.raises(BertError) as e:
                check(options)
            assert str(e.value) == want
            assert not out.exists()


def test_a_resume_with_other_phase_flags_is_one_line(data, continued, exports, tmp_path):
    options, out, _ = continued
    _resume_from(out, tmp_path / "out", N1 + 1)
    before = sorted(os.listdir(tmp_path / "out"))
    where = f"{tmp_path / 'out'} (step {N1 + 1})"
    fix = "re-run with the flags that started it, or pass another --output_dir"
    other = dataclasses.replace(options, output_dir=str(tmp_path / "out"), do_eval=False)
    cases = [
        (dict(phase2_train_batch_size=4),
         f"--phase2_train_batch_size: 4, but the checkpoint in {where} was written with 2: {fix}"),
        (dict(num_train_steps=4),
         f"--num_train_steps: 4, but the checkpoint in {where} was written with 3: {fix}"),
        (dict(phase2_input_file=None, phase2_max_seq_length=512,
              phase2_max_predictions_per_seq=80, phase2_train_batch_size=None,
              phase2_num_train_steps=None),
         f"--phase2_input_file: the checkpoint in {where} is of a two-phase run: {fix}"),
    ]
    for kw, want in cases:
        with pytest.raises(BertError) as e:
            _run(dataclasses.replace(other, **kw), exports)
        assert str(e.value) == want
        assert sorted(os.listdir(tmp_path / "out")) == before
    # A one-phase run (one step) exports before its final eval, so an eval set smaller than
    # a batch costs only the eval; its checkpoints hold no phase record, as before issue 43.
    one = dataclasses.replace(other, output_dir=str(tmp_path / "one"), phase2_input_file=None,
                              phase2_train_batch_size=None, phase2_num_train_steps=None,
                              num_train_steps=1, do_eval=True, eval_batch_size=200)
    exported = len(exports)
    with pytest.raises(BertError, match="fewer than --eval_batch_size=200 examples"):
        _run(one, exports)
    assert exports[exported:] == [16]
    assert not [k for k in _checkpoint(tmp_path / "one", 1) if k.startswith("phases")]
    # ... and does not become phase 1 of a two-phase run.
    with pytest.raises(BertError) as e:
        _run(dataclasses.replace(other, output_dir=str(tmp_path / "one")), exports)
    assert str(e.value) == (f"--phase2_input_file: the checkpoint in {tmp_path / 'one'} (step "
                            f"1) is of a one-phase run: {fix} (or start phase 2 from it with "
                            "--init_checkpoint, the two-command way)")


def test_the_two_command_way_gets_a_fresh_optimizer_and_its_own_warmup(data, continued,
                                                                      tmp_path):
    """Phase 2 as a second command, --init_checkpoint=<phase 1's output_dir> (the original's
    way): phase 1's weights, a fresh optimizer, a learning rate warming up from 0."""
    options, out, _ = continued
    second = dataclasses.replace(
        options, output_dir=str(out.parent / "second"), init_checkpoint=str(out),
        input_file=options.phase2_input_file, max_seq_length=32, max_predictions_per_seq=5,
        phase2_input_file=None, phase2_train_batch_size=None, phase2_num_train_steps=None,
        do_eval=False, num_train_steps=N2, num_warmup_steps=1)
    trainer = pretraining.make_trainer(tiny_bert_config(**CONFIG), second)
    assert trainer.restore() == "initialized"
    assert int(trainer.inner_optimizer.iterations.numpy()) == 0 and trainer.learning_rate() == 0
    # Every weight is the finished run's (its last checkpoint, resumed), variable by variable.
    last = pretraining.make_trainer(tiny_bert_config(**CONFIG), dataclasses.replace(
        second, output_dir=str(out), init_checkpoint=None, do_train=False))
    assert last.restore() == "resumed" and last.step == N1 + N2

    def named(model):  # path inside the model (the models' own names differ)
        return {v.path.split("/", 1)[1]: v.numpy() for v in model.trainable_weights}
    got, want = named(trainer.model), named(last.model)
    assert sorted(got) == sorted(want) and len(got) == len(trainer.model.trainable_weights)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_phase_schedule_is_the_documented_formula():
    """The trainer's schedule at every global step of a 900 + 100 step run equals
    phase_plan.learning_rate_at, for both choices and with a fresh optimizer's origin."""
    from bert_tf.pretraining.phases import PhaseSchedule
    base = PretrainingOptions(learning_rate=1e-4, num_train_steps=900, num_warmup_steps=90,
                              phase2_input_file="x", phase2_num_train_steps=None)
    for options in (base, dataclasses.replace(base, phase2_lr_schedule="restart",
                                              phase2_learning_rate=5e-5,
                                              phase2_num_warmup_steps=20)):
        steps = np.arange(1000)
        want = np.array([phase_plan.learning_rate_at(options, t) for t in steps])
        got = PhaseSchedule(options, tf.constant(0, tf.int64))(tf.constant(steps)).numpy()
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6 * options.learning_rate)
        assert phase_plan.total_steps(options) == 1000 and want[900:].min() > 0
        fresh = PhaseSchedule(options, tf.constant(900, tf.int64))(tf.constant(steps[:100]))
        np.testing.assert_allclose(fresh.numpy(), want[900:], rtol=2e-6, atol=1e-10)
    assert phase_plan.learning_rate_at(base, 899) == pytest.approx(1e-4 * (1 - 899 / 1000))
