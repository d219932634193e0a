"""The packed-BERT layout both ways (issue 39): records written from the layout's description
(masked_lm_weights = each prediction's sequence index, P = max_predictions_per_seq + N) and
records from before it (P = max_predictions_per_seq + N - 1, weights 1.0) evaluate and train as
the same sequences unpacked; an ordinary mask is read as `> 0`; the sequence index reaches the
model under its own name; whether a run is packed is decided once."""
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertError
from bert_tf.modeling import layers
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.pretraining import pretraining
from conftest import make_pretraining_instance, tiny_bert_config

SEQ, PRED, N = 32, 5, 3
NUM = 11  # rows of 3, 3, 3 and 2 sequences


def _feature(values, floats=False):
    if floats:
        return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))


def _write(path, rows):
    with tf.io.TFRecordWriter(str(path)) as w:
        for row in rows:
            w.write(tf.train.Example(features=tf.train.Features(feature={
                k: _feature(v, k.endswith("_weights")) for k, v in row.items()}))
                .SerializeToString())


def _layout_row(sequences, p, index_weights):
    """One packed row, from the layout's description (not from the packer's code)."""
    row = {k: [0] * SEQ for k in ("input_ids", "input_mask", "segment_ids", "positions")}
    row.update({k: [0] * p for k in ("masked_lm_positions", "masked_lm_ids")},
               masked_lm_weights=[0.0] * p)
    row.update({k: [0] * N for k in ("next_sentence_positions", "next_sentence_labels")},
               next_sentence_weights=[0.0] * N)
    offset = j = 0
    for k, f in enumerate(sequences):
        length = sum(f["input_mask"])
        for t in range(length):
            row["input_ids"][offset + t] = f["input_ids"][t]
            row["segment_ids"][offset + t] = f["segment_ids"][t]
            row["input_mask"][offset + t] = k + 1
            row["positions"][offset + t] = t
        for pos, label, w in zip(f["masked_lm_positions"], f["masked_lm_ids"],
                                 f["masked_lm_weights"]):
            if w:
                row["masked_lm_positions"][j] = offset + pos
                row["masked_lm_ids"][j] = label
                row["masked_lm_weights"][j] = float(k + 1) if index_weights else 1.0
                j += 1
        row["next_sentence_positions"][k] = offset
        row["next_sentence_labels"][k] = f["next_sentence_labels"][0]
        row["next_sentence_weights"][k] = 1.0
        offset += length
    return row


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    d = tmp_path_factory.mktemp("layout")
    rng = np.random.default_rng(5)
    feats = []
    for _ in range(NUM):  # 7..10 tokens, padded to 32: three fit in a row
        f = make_pretraining_instance(rng, 10, PRED, 64, min_len=7)
        for k in ("input_ids", "input_mask", "segment_ids"):
            f[k] = f[k] + [0] * (SEQ - 10)
        feats.append(f)
    _write(d / "unpacked.tfrecord", feats)
    groups = [feats[i:i + N] for i in range(0, NUM, N)]
    _write(d / "layout.tfrecord", [_layout_row(g, PRED + N, True) for g in groups])
    _write(d / "old.tfrecord", [_layout_row(g, PRED + N - 1, False) for g in groups])
    assert max(_layout_row(groups[0], PRED + N, True)["masked_lm_weights"]) == 3.0
    return dict(dir=d, groups=len(groups), unpacked=str(d / "unpacked.tfrecord"),
                layout=str(d / "layout.tfrecord"), old=str(d / "old.tfrecord"))


def _trainer(tmp_path, name, packed, eval_batch_size):
    options = pretraining.PretrainingOptions(
        output_dir=str(tmp_path / name), max_seq_length=SEQ, max_predictions_per_seq=PRED,
        train_batch_size=4, eval_batch_size=eval_batch_size, learning_rate=1e-3,
        num_train_steps=1, num_warmup_steps=0, seed=3, progress=False, strategy="one_device")
    return pretraining.make_trainer(tiny_bert_config(num_hidden_layers=1), options,
                                    packed=packed)


def _loss_and_grads(trainer, pattern, batch_size):
    task = trainer.task
    batch = next(iter(task.dataset_fn(pattern, False)(tf.distribute.InputContext(),
                                                      batch_size, 1, 0)))
    with tf.GradientTape() as tape:
        outputs = trainer.model({k: batch[k] for k in task.model_inputs}, training=False)
        loss, stats = task.loss(batch, outputs, task.normalizers(batch))
    return loss, stats, tape.gradient(loss, trainer.model.trainable_variables)


def test_packed_layout_evaluates_and_trains_as_unpacked(records, tmp_path):
    """Weights 1, 2, 3 (the layout) and 1.0 (records from before it): eval results, loss,
    statistics and gradients of the unpacked records, within 1e-5."""
    plain = _trainer(tmp_path, "plain", False, NUM)
    packed = _trainer(tmp_path, "packed", True, records["groups"])
    for a, b in zip(plain.model.weights, packed.model.weights):  # same seed, same weights
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    want = plain.evaluate(plain.task.dataset_fn(records["unpacked"], False), 1)
    loss_u, stats_u, grads_u = _loss_and_grads(plain, records["unpacked"], NUM)
    for layout in ("layout", "old"):
        got = packed.evaluate(packed.task.dataset_fn(records[layout], False), 1)
        assert set(got) >= {"loss", "masked_lm_loss", "masked_lm_accuracy",
                            "next_sentence_loss", "next_sentence_accuracy"}
        for key, value in want.items():
            assert got[key] == pytest.approx(value, abs=1e-5), (layout, key)
        loss_p, stats_p, grads_p = _loss_and_grads(packed, records[layout], records["groups"])
        np.testing.assert_allclose(loss_p.numpy(), loss_u.numpy(), atol=1e-5, err_msg=layout)
        for key in ("mlm_loss_sum", "mlm_weight", "mlm_correct", "nsp_loss_sum", "examples"):
            np.testing.assert_allclose(stats_p[key].numpy(), stats_u[key].numpy(), atol=1e-5,
                                       err_msg=f"{layout} {key}")
        assert stats_p["examples"].numpy() == NUM
        for v, gp, gu in zip(packed.model.trainable_variables, grads_p, grads_u):
            np.testing.assert_allclose(tf.convert_to_tensor(gp).numpy(),
                                       tf.convert_to_tensor(gu).numpy(), atol=1e-5,
                                       err_msg=f"{layout} {v.path}")


def test_a_run_is_packed_or_not_once_from_its_records(records, tmp_path):
    options = lambda name, pattern: pretraining.PretrainingOptions(  # noqa: E731
        output_dir=str(tmp_path / name), input_file=pattern, max_seq_length=SEQ,
        max_predictions_per_seq=PRED, train_batch_size=2, num_train_steps=1, progress=False,
        strategy="one_device")
    config = tiny_bert_config(num_hidden_layers=1)
    packed = pretraining.make_trainer(config, options("p", records["layout"]))
    plain = pretraining.make_trainer(config, options("u", records["unpacked"]))
    assert packed.task.packed and not plain.task.packed  # before any dataset is made
    assert "input_sequence_index" in packed.task.model_inputs
    assert "input_sequence_index" not in plain.task.model_inputs
    ctx = tf.distribute.InputContext()
    with pytest.raises(BertError, match=r"^--input_file=.*layout\.tfrecord: packed records, but "
                                        r"this run was set up for ordinary \(unpacked\) ones"):
        plain.task.dataset_fn(records["layout"], False)(ctx, 2, 1, 0)
    assert not plain.task.packed


def test_deciding_packed_starts_no_tensorflow_runtime(records, tmp_path):
    """The run decides packed-or-not before its strategy; reading a record with tf.data there
    started TensorFlow's context, and a multi-worker strategy then failed with "Collective ops
    must be configured at program startup". Now the records are read in Python."""
    import os
    import subprocess
    import sys
    (tmp_path / "junk.txt").write_text("not a TFRecord file\n")  # no readable record: False
    code = ("import sys; from bert_tf.pretraining import pretraining; "
            "from tensorflow.python.eager import context; "
            "print(pretraining.records_are_packed(sys.argv[1]), "
            "pretraining.records_are_packed(sys.argv[2]), "
            "pretraining.records_are_packed(sys.argv[3]), context.context()._context_handle)")
    res = subprocess.run([sys.executable, "-c", code, records["layout"], records["unpacked"],
                          str(tmp_path / "junk.txt")],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert res.stdout.split() == ["True", "False", "False", "None"], res.stderr[-2000:]


def test_an_ordinary_mask_is_read_as_greater_than_zero():
    bias = layers.attention_bias(tf.constant([[1, 2, 3, 0]])).numpy()
    np.testing.assert_array_equal(bias.reshape(-1), [0.0, 0.0, 0.0, -10000.0])


def test_half_a_packed_row_is_a_one_line_error():
    encoder = BertEncoder.from_bert_config(tiny_bert_config(num_hidden_layers=1))
    ids = tf.ones((1, 6), tf.int32)
    base = {"input_word_ids": ids, "input_mask": ids, "input_type_ids": ids * 0}
    with pytest.raises(BertError, match=r"^BertEncoder inputs: packed rows need both "
                                        r"input_positions and input_sequence_index .*got only "
                                        r"input_positions$"):
        encoder({**base, "input_positions": tf.constant([[0, 1, 2, 0, 1, 2]])})
    with pytest.raises(BertError, match=r"got only input_sequence_index$"):
        encoder({**base, "input_sequence_index": tf.constant([[1, 1, 1, 2, 2, 2]])})
    # Both: two sequences of 3 each see only themselves, as each one alone.
    both = encoder({**base, "input_positions": tf.constant([[0, 1, 2, 0, 1, 2]]),
                    "input_sequence_index": tf.constant([[1, 1, 1, 2, 2, 2]])})
    alone = encoder({k: v[:, :3] for k, v in base.items()})
    out = both["sequence_output"].numpy()
    np.testing.assert_allclose(out[0, :3], alone["sequence_output"].numpy()[0], atol=1e-5)
    np.testing.assert_allclose(out[0, 3:], alone["sequence_output"].numpy()[0], atol=1e-5)
