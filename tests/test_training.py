"""bert_tf.pretraining.pretraining (on the one trainer) and run_pretraining.py: learning, replicas, resume, accumulation, precision,
eval results and command-line errors (tiny config, mostly one layer, CPU)."""
import os

import numpy as np
import pytest

import bert_tf
import keras
import tensorflow as tf

from bert_tf.training.distribute import get_strategy, set_mixed_precision
from bert_tf.modeling.models import BertPretrainer, build_model
from bert_tf.pretraining.pretraining import (EVAL_KEYS, PretrainingOptions, make_trainer,
                                          run_pretraining, summarize)
from conftest import TWO_CPUS, run_pretraining_cases, scalar_summaries, tiny_bert_config


def _config():
    """One layer: a trace or export of it takes ~40% less time than of conftest's two (the
    shared 50-step run keeps two: its accuracy gain asserted below needs them)."""
    return tiny_bert_config(num_hidden_layers=1)


def _options(**kw):
    base = dict(max_seq_length=32, max_predictions_per_seq=5, train_batch_size=8,
                eval_batch_size=8, learning_rate=1e-3, num_train_steps=20, num_warmup_steps=2,
                save_checkpoints_steps=100, iterations_per_loop=1, seed=7, progress=False)
    base.update(kw)
    return PretrainingOptions(**base)


def _runner(tmp_path, name, config=None, strategy=None, **kw):
    runner = make_trainer(config or _config(),
                          _options(output_dir=str(tmp_path / name), **kw), strategy)
    runner.restore()
    return runner


def _train(runner, pattern, until_step=None):
    return runner.train(runner.task.dataset_fn(pattern, True), until_step=until_step)


def _losses(history):
    return [m["loss"] for m in history]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Two synthetic shards shared by this module's tests: (glob pattern, features)."""
    from conftest import write_pretraining_records
    d = tmp_path_factory.mktemp("records")
    feats = []
    for i in range(2):
        feats += write_pretraining_records(d / f"shard-{i}.tfrecord", 96, seed=i)
    return str(d / "shard-*.tfrecord"), feats


@pytest.fixture(scope="module")
def reference(records, tmp_path_factory):
    """One device, float32, no dropout, global batch 8: 3 steps (compared against below)."""
    runner = _runner(tmp_path_factory.mktemp("reference"), "ref",
                     strategy=tf.distribute.OneDeviceStrategy("/cpu:0"))
    history = _train(runner, records[0], until_step=3)
    assert _losses(history)[0] != _losses(history)[2]
    return runner, history


@pytest.fixture(scope="module")
def trained(records, tmp_path_factory):
    """One 50-step run (dropout 0.1, --do_eval, the ids-in export, no --vocab_file) and the
    bert_tf log messages it wrote (test_vocab_file_exports_text_in_models_for_serving reads
    its --vocab_file hint)."""
    import logging
    d = tmp_path_factory.mktemp("trained")
    config_file = d / "bert_config.json"
    tiny_bert_config(dropout=0.1).to_json_file(str(config_file))
    out = d / "out"
    messages = []

    class Keep(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())
    logger, handler = logging.getLogger("bert_tf"), Keep(logging.INFO)
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        result = run_pretraining(_options(bert_config_file=str(config_file), input_file=records[0],
                                          output_dir=str(out), do_train=True, do_eval=True,
                                          train_batch_size=16, learning_rate=1e-3,
                                          num_train_steps=50, num_warmup_steps=5,
                                          iterations_per_loop=10, save_checkpoints_steps=25,
                                          max_eval_steps=4))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return dict(config_file=config_file, out=out, result=result, messages=messages)


def test_loss_decreases_checkpoints_eval_and_export(tmp_path, trained):
    out, result = trained["out"], trained["result"]
    losses = _losses(result["train"])
    # Off TPU a loop is at most a tenth of the run: 10 progress lines, not 5.
    loops = list(range(5, 51, 5))
    assert [m["step"] for m in result["train"]] == loops
    # The first and last 10 steps (two loops each).
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2 - 0.4, losses
    assert max(losses[-2:]) < min(losses[:2]), losses
    acc = [m["masked_lm_accuracy"] for m in result["train"]]
    assert sum(acc[-2:]) > 3 * sum(acc[:2]), acc
    assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-50")
    assert tf.io.gfile.exists(str(out / "model.ckpt-25.index"))
    assert tf.io.gfile.exists(os.path.join(result["export_dir"], "saved_model.pb"))
    assert result["export_dir"] == str(out / "export")
    lines = (out / "eval_results.txt").read_text().splitlines()
    assert [line.split(" = ")[0] for line in lines] == sorted(EVAL_KEYS)
    values = {k: float(v) for k, v in (line.split(" = ") for line in lines)}
    assert values["global_step"] == 50 and lines[0] == "global_step = 50"
    assert 0 < values["masked_lm_accuracy"] <= 1 and 0 < values["next_sentence_loss"] < 2
    assert not [p for p in os.listdir(out) if ".tmp" in p]
    tags = scalar_summaries(out)
    assert sorted(tags) == ["examples_per_second", "learning_rate", "loss", "masked_lm_accuracy",
                            "masked_lm_loss", "next_sentence_accuracy", "next_sentence_loss",
                            "sequences_per_second"]
    assert [step for step, _ in tags["loss"]] == loops
    # The chief's record of the eval (evaluation.record): its summaries and its log line.
    eval_tags = scalar_summaries(out / "eval")
    assert {k: [step for step, _ in v] for k, v in eval_tags.items()} == {
        k: [50] for k in EVAL_KEYS[1:]}
    assert abs(eval_tags["masked_lm_accuracy"][0][1] - values["masked_lm_accuracy"]) < 1e-6
    line = [m for m in trained["messages"] if m.startswith("eval at step ")]
    assert line == ["eval at step 50: " + " ".join(
        f"{k}={values[k]:.4f}" for k in EVAL_KEYS[1:])], line
    # --init_checkpoint from that output_dir, and the exported encoder, hold the trained weights.
    init = make_trainer(tiny_bert_config(dropout=0.1),
                        _options(output_dir=str(tmp_path / "init"), init_checkpoint=str(out)))
    assert init.restore() == "initialized" and int(init.global_step.numpy()) == 0
    ids = _ids_batch()
    want = init.model.encoder(ids, training=False)["pooled_output"].numpy()
    loaded = tf.saved_model.load(result["export_dir"])
    got = loaded.signatures["serving_default"](**ids)["pooled_output"].numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    fresh = build_model(BertPretrainer.from_bert_config(tiny_bert_config(dropout=0.1)))
    assert not np.allclose(fresh.encoder(ids)["pooled_output"].numpy(), want, atol=1e-3)


def test_init_checkpoint_accepts_an_original_tf1_checkpoint(tmp_path):
    from bert_tf.convert.checkpoints import save_tf1_checkpoint
    source = build_model(BertPretrainer.from_bert_config(_config()))
    for v in source.encoder.weights:  # recognisable values, unlike a fresh initialisation
        v.assign(np.random.default_rng(len(v.path)).normal(size=v.shape).astype("float32"))
    prefix = save_tf1_checkpoint(source, str(tmp_path / "tf1" / "bert_model.ckpt"))
    runner = make_trainer(_config(),
                          _options(output_dir=str(tmp_path / "out"), init_checkpoint=prefix))
    assert runner.restore() == "initialized"
    for a, b in zip(source.encoder.weights, runner.model.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def _ids_batch():
    ids = np.array([[1] + [5] * 10 + [2] + [9] * 5 + [2] + [0] * 14] * 2, np.int32)
    ids[1, 3] = 7
    return {"input_word_ids": tf.constant(ids), "input_mask": tf.constant((ids > 0).astype(np.int32)),
            "input_type_ids": tf.constant(np.array([[0] * 12 + [1] * 6 + [0] * 14] * 2,
                                                   np.int32))}


def test_training_and_eval_steps_run_the_last_block_only_where_read(tmp_path, records,
                                                                   monkeypatch):
    """The pre-training task's steps call BertPretrainer.pretraining_logits (Task.forward),
    not the model's full call."""
    traced = []
    original = BertPretrainer.pretraining_logits

    def spy(self, inputs, training=None):
        traced.append(training)
        return original(self, inputs, training=training)

    monkeypatch.setattr(BertPretrainer, "pretraining_logits", spy)
    runner = _runner(tmp_path, "forward", num_train_steps=1)
    _train(runner, records[0])
    runner.evaluate(runner.task.dataset_fn(records[0], False), max_steps=1)
    assert True in traced and False in traced, traced


def test_eval_metrics_match_an_eager_computation(tmp_path, records):
    pattern, feats = records
    runner = _runner(tmp_path, "eval")
    res = runner.evaluate(runner.task.dataset_fn(pattern, False), max_steps=1)
    # Same numbers from the first 8 records (eval reads the files in order).
    f = {k: np.array([x[k] for x in feats[:8]]) for k in feats[0]}
    out = runner.model({"input_word_ids": f["input_ids"].astype(np.int32),
                        "input_mask": f["input_mask"].astype(np.int32),
                        "input_type_ids": f["segment_ids"].astype(np.int32),
                        "masked_lm_positions": f["masked_lm_positions"].astype(np.int32)},
                       training=False)
    logits = out["mlm_logits"].numpy().astype(np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    w = f["masked_lm_weights"]
    ce = -np.take_along_axis(logp, f["masked_lm_ids"][..., None], -1)[..., 0]
    acc = (logits.argmax(-1) == f["masked_lm_ids"])
    nsp = out["nsp_logits"].numpy().astype(np.float64)
    nsp_logp = nsp - np.log(np.exp(nsp).sum(-1, keepdims=True))
    labels = f["next_sentence_labels"][:, 0]
    nsp_ce = -nsp_logp[np.arange(8), labels]
    want = {"masked_lm_loss": (w * ce).sum() / w.sum(),
            "masked_lm_accuracy": (w * acc).sum() / w.sum(),
            "next_sentence_loss": nsp_ce.mean(),
            "next_sentence_accuracy": (nsp.argmax(-1) == labels).mean(),
            "loss": (w * ce).sum() / (w.sum() + 1e-5) + nsp_ce.mean()}
    for k, v in want.items():
        assert res[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
    assert res["global_step"] == 0


# Slow (~40 s): the default suite keeps two replicas on packed batches (test_packed_training)
# and in fine-tuning (test_tasks_learn's mirrored test).
@pytest.mark.slow
@pytest.mark.skipif(not TWO_CPUS, reason="TensorFlow was initialised before conftest split the CPU")
def test_two_replicas_match_one_device(tmp_path, records, reference):
    one, h1 = reference
    two = _runner(tmp_path, "two", strategy=get_strategy("mirrored"))
    assert two.strategy.num_replicas_in_sync == 2
    h2 = _train(two, records[0], until_step=3)
    np.testing.assert_allclose(_losses(h1), _losses(h2), rtol=0, atol=1e-4)
    for v1, v2 in zip(one.model.weights, two.model.weights):
        np.testing.assert_allclose(v1.numpy(), v2.numpy(), atol=2e-5, err_msg=v1.path)


@pytest.mark.skipif(not TWO_CPUS, reason="TensorFlow was initialised before conftest split the CPU")
def test_strategies_in_one_process_use_distinct_collective_keys():
    # Plain tf.distribute.MirroredStrategy objects all start at the same collective keys, and TF
    # caches a key's shape: the second all-reduce below would abort with "Shape mismatch in the
    # collective instance 100" (the CI failure of test_two_replicas_match_one_device).
    def all_reduce_ones(strategy, shape):
        @tf.function
        def fn():
            return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(
                "sum", tf.ones(shape)))
        return strategy.experimental_local_results(fn())[0].numpy()

    np.testing.assert_array_equal(all_reduce_ones(get_strategy("mirrored"), [3]), [2, 2, 2])
    np.testing.assert_array_equal(all_reduce_ones(get_strategy("mirrored"), [1]), [2])


# Slow (~30 s): the default suite resumes to the uninterrupted run's numbers in test_two_phase,
# test_bf16 and test_trainer.
@pytest.mark.slow
def test_resume_continues_with_identical_losses(tmp_path, records):
    pattern, _ = records
    config = tiny_bert_config(dropout=0.1)  # dropout RNG state is part of the checkpoint
    kw = dict(num_train_steps=4, save_checkpoints_steps=2)
    # The uninterrupted run: one iterator for all 4 steps, checkpointed after step 2.
    run = _runner(tmp_path, "run", config, **kw)
    iterator = iter(run.distribute(run.task.dataset_fn(pattern, True), training=True))
    full = []
    for step in range(4):
        full.append(summarize({k: float(v) for k, v in run.train_loop(iterator, 1).items()},
                              1)["loss"])
        if step == 1:
            run.save()
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith("model.ckpt-2")
    # A restart in that output_dir (with another --seed: the checkpoint's wins) continues it.
    resumed = _runner(tmp_path, "run", config, **dict(kw, seed=123))
    assert int(resumed.global_step.numpy()) == 2
    assert int(resumed.inner_optimizer.iterations.numpy()) == 2
    rest = _train(resumed, pattern)
    assert [m["step"] for m in rest] == [3, 4]
    np.testing.assert_allclose(_losses(rest), full[2:], rtol=0, atol=1e-6)
    assert full[2] != full[3]


def test_gradient_accumulation_equals_one_batch(tmp_path, records, reference):
    plain, h1 = reference
    accum = _runner(tmp_path, "k4", train_batch_size=8, grad_accum_steps=4)
    h4 = _train(accum, records[0], until_step=3)
    np.testing.assert_allclose(_losses(h1), _losses(h4), rtol=0, atol=1e-5)
    for v1, v4 in zip(plain.model.trainable_weights, accum.model.trainable_weights):
        np.testing.assert_allclose(v1.numpy(), v4.numpy(), atol=1e-5, err_msg=v1.path)
    with pytest.raises(bert_tf.BertError, match="--grad_accum_steps"):
        _runner(tmp_path, "bad", train_batch_size=8, grad_accum_steps=3)


@pytest.fixture
def restore_policy():
    yield
    set_mixed_precision("none")


# bfloat16 is slow here (~16 s): tests/test_bf16.py trains, evaluates, resumes and exports it.
@pytest.mark.parametrize("precision", [pytest.param("bfloat16", marks=pytest.mark.slow), "float16"])
def test_mixed_precision(tmp_path, records, reference, precision, restore_policy):
    ref = _losses(reference[1])
    runner = _runner(tmp_path, precision, mixed_precision=precision)
    history = _train(runner, records[0], until_step=3)
    assert runner.model.encoder.compute_dtype == precision
    assert all(v.dtype == "float32" for v in runner.model.trainable_weights)
    np.testing.assert_allclose(_losses(history), ref, atol=0.05)
    if precision == "float16":
        assert isinstance(runner.optimizer, keras.optimizers.LossScaleOptimizer)
        assert history[-1]["loss_scale"] == 2.0 ** 15
        assert int(runner.inner_optimizer.iterations.numpy()) == 3  # no step skipped
    else:
        assert "loss_scale" not in history[-1]


def test_cli_runs_and_reports_bad_flags_in_one_line(tmp_path, records):
    pattern, _ = records
    config = tmp_path / "bert_config.json"
    _config().to_json_file(str(config))
    common = [f"--input_file={pattern}", f"--output_dir={tmp_path / 'out'}", "--do_train",
              "--max_seq_length=32", "--max_predictions_per_seq=5", "--train_batch_size=4",
              "--num_train_steps=2", "--num_warmup_steps=1", "--iterations_per_loop=2",
              "--seed=1"]
    # One interpreter runs every case (a fresh flag parse + main() each): TF starts once.
    cases = {
        "ok": ([f"--bert_config_file={config}", "--do_eval", "--max_eval_steps=1",
                "--eval_batch_size=4"] + common, "no error"),
        "missing config": ([f"--bert_config_file={tmp_path / 'nope.json'}"] + common,
                           f"error: {tmp_path / 'nope.json'}: bert_config file not found"),
        "no config flag": (common, "error: --bert_config_file: required"),
        "no input": ([f"--bert_config_file={config}", f"--input_file={tmp_path}/x-*.rec",
                      f"--output_dir={tmp_path / 'o2'}", "--do_train"],
                     f"error: --input_file: '{tmp_path}/x-*.rec' matches no files"),
        # The records' lengths (checked first, before TensorFlow) as they are: the batch is
        # the one thing wrong, and needs the strategy's replicas to be found.
        "indivisible batch": ([f"--bert_config_file={config}", "--strategy=mirrored"]
                              + [f for f in common if "train_batch_size" not in f]
                              + ["--train_batch_size=3"],
                              "error: --train_batch_size: 3 is not divisible by the 2 replicas"),
        "unknown strategy": ([f"--bert_config_file={config}", "--strategy=gpu_farm"] + common,
                             "error: --strategy: unknown strategy 'gpu_farm'; expected one of "
                             "one_device, mirrored, multi_worker, tpu, auto"),
        "no tpu": ([f"--bert_config_file={config}", "--use_tpu"] + common,
                   "error: --use_tpu: no TPU found (no --tpu_name, no TPU_NAME and no local TPU "
                   "devices)"),
        "nothing to do": ([f"--bert_config_file={config}", f"--input_file={pattern}",
                           f"--output_dir={tmp_path / 'o3'}"],
                          "error: --do_train/--do_eval/--export_dir: at least one must be set"),
        "nothing to export": ([f"--bert_config_file={config}", f"--output_dir={tmp_path / 'o4'}",
                               f"--export_dir={tmp_path / 'e4'}", "--max_seq_length=32"],
                              f"error: --output_dir={tmp_path / 'o4'}: no checkpoint to export "
                              "(and no --init_checkpoint)"),
    }
    got, stdout = run_pretraining_cases({k: v[0] for k, v in cases.items()}, tmp_path,
                                        split_cpus=True)
    for name, (_, want) in cases.items():
        assert got[name] == want, name
    lines = (tmp_path / "out" / "eval_results.txt").read_text().splitlines()
    assert lines[0] == "global_step = 2" and len(lines) == len(EVAL_KEYS)
    assert (tmp_path / "out" / "export" / "saved_model.pb").exists()
    assert "masked_lm_accuracy = " in stdout
    # The separate export step (no --do_train): test_vocab_file_exports_text_in_models_for_
    # serving; main()'s one stderr line and exit status 1 in a process of its own (~8 s):
    # test_preflight's test_dynamic_masking_on_packed_records_is_one_line.


def _vocab(path, tokens):
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


def test_vocab_file_exports_text_in_models_for_serving(tmp_path, records, trained):
    from bert_tf.export import serving
    pattern, _ = records
    # One layer (not the shared run's two): less to trace in the four exports and their loads.
    config_file = tmp_path / "bert_config.json"
    _config().to_json_file(str(config_file))
    # ids 1-3 are [CLS]/[SEP]/[MASK] in the synthetic records, as in this vocab
    tokens = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"] + [f"w{i}" for i in range(59)]
    common = dict(bert_config_file=str(config_file), input_file=pattern, do_train=True,
                  num_train_steps=2, num_warmup_steps=1, iterations_per_loop=2)
    # Bad vocabs fail before any step, and leave nothing behind.
    for bad, want in ((tokens + ["w64"], r".*bad_vocab.txt: 65 lines but .* has vocab_size 64"),
                      ([t for t in tokens if t != "[MASK]"] + ["w59"],
                       r"--vocab_file=.*: no \[MASK\] token")):
        out = tmp_path / "bad"
        with pytest.raises(bert_tf.BertError, match=r"^" + want):
            run_pretraining(_options(output_dir=str(out), vocab_file=_vocab(
                tmp_path / "bad_vocab.txt", bad), **common))
        assert not out.exists()
    # Without a vocab (the shared 50-step run): the ids-in encoder, and one line saying how to
    # get text-in models.
    hints = [m for m in trained["messages"] if "--vocab_file" in m]
    assert len(hints) == 1 and "ids-in encoder" in hints[0]
    assert (trained["out"] / "export" / "saved_model.pb").exists()
    # The separate export step with a vocab: four models in the TF Serving layout, from a
    # checkpoint of random weights (not the seeded initialisation: an export that ignored
    # the checkpoint would fail the comparisons below).
    out = tmp_path / "out"
    source = make_trainer(_config(), _options(output_dir=str(out)))
    assert source.restore() == "fresh"
    rng = np.random.default_rng(3)
    for v in source.model.trainable_weights:
        v.assign(rng.normal(0, 0.2, v.shape).astype(v.dtype))
    source.save()
    export_dir = tmp_path / "serving"
    result = run_pretraining(_options(
        bert_config_file=str(config_file), output_dir=str(out), export_dir=str(export_dir),
        vocab_file=_vocab(tmp_path / "vocab.txt", tokens), do_lower_case=True,
        model_name="tiny"))
    assert result["export_dir"] == str(export_dir)
    names = ["tiny", "tiny_embeddings", "tiny_encoder", "tiny_preprocessor"]
    assert sorted(os.listdir(export_dir)) == names
    loaded = {}
    for name in names:
        assert os.listdir(export_dir / name) == ["1"]
        path = str(export_dir / name / "1")
        loaded[name] = tf.saved_model.load(path)
        requests = serving.read_warmup_file(os.path.join(path, "assets.extra",
                                                         serving.WARMUP_FILE))
        assert len(requests) >= 2 and {r.model_spec.name for r in requests} == {name}
        for request in requests:  # every warm-up request runs against its model
            assert serving.run_predict_request(loaded[name], request)
    # Text in: the preprocessor's ids through the exported encoder = the checkpoint's encoder.
    trainer = make_trainer(_config(), _options(output_dir=str(out)))
    assert trainer.restore() == "resumed"
    ids = loaded["tiny_preprocessor"].signatures["serving_default"](
        text=tf.constant(["w1 w2 w3", "w4"]))
    assert ids["input_word_ids"].numpy()[0, :5].tolist() == [1, 6, 7, 8, 2]
    want = trainer.model.encoder(ids, training=False)["pooled_output"].numpy()
    got = loaded["tiny_encoder"].signatures["serving_default"](**ids)["pooled_output"]
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
    emb = loaded["tiny_embeddings"].signatures["serving_default"](
        text=tf.constant(["w1 w2 w3", "w4"]))["pooled_output"]
    np.testing.assert_allclose(emb.numpy(), want, atol=1e-5)
    fill = loaded["tiny"].signatures["serving_default"](text=tf.constant(["w1 [MASK] w3"]))
    assert fill["mask_count"].numpy().tolist() == [1]
    assert {t.decode() for t in fill["top_k_tokens"].numpy()[0, 0]} <= set(tokens)
