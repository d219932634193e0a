"""The one trainer under a fine-tuning task: features that used to exist only in pre-training
(accumulation, resume with dropout RNG state, TensorBoard, no cap on iterations per loop) and
ones that used to exist only in fine-tuning (divergence check, variables without gradient)."""

import numpy as np
import pytest

import tensorflow as tf

from bert_tf import BertError
from bert_tf.modeling.models import BertTokenClassifier
from bert_tf.tasks import finetune
from conftest import scalar_summaries, tiny_bert_config


class Tagging(finetune.FinetuneTask):
    def __init__(self, cfg, dropout):
        super().__init__(cfg, "tagging")
        self.dropout = dropout

    def build_model(self):
        model = BertTokenClassifier.from_bert_config(tiny_bert_config(num_hidden_layers=1), 3,
                                                     dropout_rate=self.dropout)
        return finetune.built(model, self.cfg)


def _trainer(tmp_path, name, dropout=0.0, **overrides):
    kw = dict(output_dir=str(tmp_path / name), max_seq_length=8, train_batch_size=4,
              learning_rate=1e-2, seed=1, progress=False, strategy="one_device",
              iterations_per_loop=1)
    kw.update(overrides)
    cfg = finetune.RunConfig(**kw)
    return finetune.make_trainer(Tagging(cfg, dropout), cfg)


def _arrays(n=16):
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 64, (n, 8)).astype(np.int32)
    weights = (rng.random((n, 8)) < 0.5).astype(np.float32)
    return {"input_word_ids": ids, "input_mask": np.ones_like(ids),
            "input_type_ids": np.zeros_like(ids),
            "label_ids": rng.integers(0, 3, (n, 8)).astype(np.int32), "label_weights": weights}


def _train(trainer, steps, until=None):
    if trainer.optimizer is None:
        trainer.build_optimizer(steps, 0)
        trainer.restore()
    return trainer.train(finetune.arrays_dataset_fn(_arrays()), until_step=until)


def test_accumulation_equals_one_batch_and_pooler_gets_no_update(tmp_path):
    one = _trainer(tmp_path, "k1")
    pooler = {v.path.split("/", 1)[1]: v.numpy() for v in one.model.trainable_variables
              if "pooler" in v.path}
    assert pooler  # the tagging model has an unused pooler
    h1 = _train(one, 3)
    accum = _trainer(tmp_path, "k2", grad_accum_steps=2)
    h2 = _train(accum, 3)
    np.testing.assert_allclose([m["loss"] for m in h2], [m["loss"] for m in h1], atol=1e-5)
    for a, b in zip(one.model.trainable_variables, accum.model.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, err_msg=a.path)
    # No gradient -> no update at all (weight decay included), with and without accumulation.
    for trainer in (one, accum):
        for v in trainer.model.trainable_variables:
            if "pooler" in v.path:
                np.testing.assert_array_equal(v.numpy(), pooler[v.path.split("/", 1)[1]])


def test_resume_with_dropout_and_no_cap_on_iterations_per_loop(tmp_path):
    full = _train(_trainer(tmp_path, "full", dropout=0.3), 4)
    first = _trainer(tmp_path, "run", dropout=0.3, save_checkpoints_steps=2)
    assert [m["step"] for m in _train(first, 4, until=2)] == [1, 2]
    resumed = _trainer(tmp_path, "run", dropout=0.3, save_checkpoints_steps=2, seed=99)
    rest = _train(resumed, 4)
    assert resumed.step == 4 and [m["step"] for m in rest] == [3, 4]
    np.testing.assert_allclose([m["loss"] for m in rest], [m["loss"] for m in full[2:]],
                               rtol=0, atol=1e-6)
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith("ckpt-4")
    # Off TPU a loop is at most a tenth of the run (10 progress lines), whatever
    # iterations_per_loop says above that; TensorBoard summaries at each loop's end.
    big = _trainer(tmp_path, "big", iterations_per_loop=60, learning_rate=1e-3)
    history = _train(big, 70)
    assert [m["step"] for m in history] == list(range(7, 71, 7))
    steps = [step for step, _ in scalar_summaries(tmp_path / "big")["loss"]]
    assert steps == list(range(7, 71, 7))


def test_divergence_is_one_error_line(tmp_path):
    trainer = _trainer(tmp_path, "diverge", learning_rate=1e30, weight_decay_rate=0.0)
    with pytest.raises(BertError, match=r"^training diverged at step \d+: loss (nan|inf)"):
        _train(trainer, 20)


def test_a_bad_record_is_the_tasks_one_line_error():
    """The trainer reads no record format (issue 43 D): an OpError of an eval (or training)
    loop becomes the task's `explain_data_error`, else stays as it is; pre-training's names the
    file and record its in-graph checks found."""
    from bert_tf.pretraining.options import PretrainingOptions
    from bert_tf.pretraining.pretraining import PretrainingTask
    from bert_tf.training import evaluation
    from bert_tf.training.task import Task
    err = tf.errors.InvalidArgumentError(
        None, None, "assertion failed: [--input_file a.tfrecord: record 3: bad] [Op:Assert]")

    def batches():
        raise err
    with pytest.raises(tf.errors.InvalidArgumentError):
        evaluation.run_eval(None, batches, Task(), 1, "empty")
    with pytest.raises(BertError) as e:
        evaluation.run_eval(None, batches, PretrainingTask(None, PretrainingOptions()), 1, "empty")
    assert str(e.value) == "--input_file a.tfrecord: record 3: bad"


def test_a_bad_record_in_a_training_loop_is_the_tasks_one_line_error():
    """The training loop's side of the hook above: `Trainer._run_loop` raises the task's
    `explain_data_error`, else the OpError unchanged."""
    import types
    from bert_tf.pretraining.options import PretrainingOptions
    from bert_tf.pretraining.pretraining import PretrainingTask
    from bert_tf.training.task import Task
    from bert_tf.training.trainer import Trainer
    err = tf.errors.InvalidArgumentError(
        None, None, "assertion failed: [--input_file a.tfrecord: record 3: bad] [Op:Assert]")

    def loop(iterator, steps):
        raise err
    stub = types.SimpleNamespace(_loop=loop, step=0, task=Task(), strategy=types.SimpleNamespace(
        extended=types.SimpleNamespace(_num_workers=1)))
    with pytest.raises(tf.errors.InvalidArgumentError):
        Trainer._run_loop(stub, None, 1)
    stub.task = PretrainingTask(None, PretrainingOptions())
    with pytest.raises(BertError) as e:
        Trainer._run_loop(stub, None, 1)
    assert str(e.value) == "--input_file a.tfrecord: record 3: bad"
