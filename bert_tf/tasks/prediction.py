"""Predictions of a fine-tuned model over in-memory feature arrays: batched, cut to each
batch's real length where `finetune.cuts_batches` says so, per-position outputs padded back."""
import numpy as np

from bert_tf import BertError
from bert_tf.tasks.finetune import cuts_batches
from bert_tf.training.task import INPUT_NAMES


def predict(trainer, features, batch_size, output_keys, desc="predict"):
    """Model outputs (float32 NumPy) for every example, in order.

    Args: as `predict_batches`, whose batches this concatenates.
    """
    results = {k: [] for k in output_keys}
    for out in predict_batches(trainer, features, batch_size, output_keys, desc):
        for k in output_keys:
            results[k].append(out[k])
    return {k: np.concatenate(v, axis=0) if v else np.zeros((0,), np.float32)
            for k, v in results.items()}


def predict_batches(trainer, features, batch_size, output_keys, desc="predict"):
    """Yields dicts of float32 NumPy outputs batch by batch (streaming consumers).

    The last batch is padded to full size (and the padding dropped from its outputs), and the
    iterator is never run to its end (ending a distributed iterator costs about a second).
    Unless --pad_to_max_seq_length or a TPU, each batch is cut to its real length (rounded up
    to a multiple of 8: the prediction step is not XLA-compiled) and per-position outputs
    (`real_length.output_kinds`) come back [N, S, ...]: every padding position (input_mask 0)
    holds 0, or what the model declares (`real_length.SPAN_PAD_LOGIT` for start/end logits),
    whatever the batch. A model whose outputs cannot be classified is not cut (logged once).

    Args:
        trainer: from make_trainer (restored).
        features: dict of NumPy arrays with the encoder inputs.
        batch_size: global batch.
        output_keys: model outputs to return.
        desc: progress bar label.
    """
    import tensorflow as tf
    from bert_tf.modeling import real_length
    from bert_tf.progress import bar as tqdm
    batch_size = int(batch_size)
    if batch_size <= 0:
        raise BertError(f"batch size: must be > 0, got {batch_size}")
    inputs = {k: np.asarray(features[k]) for k in INPUT_NAMES}
    n, seq_length = inputs["input_word_ids"].shape[:2]
    num_batches = -(-n // batch_size)
    pad = num_batches * batch_size - n
    if pad:  # all-zero rows: input_mask 0 everywhere, outputs discarded
        inputs = {k: np.concatenate([v, np.zeros((pad,) + v.shape[1:], v.dtype)])
                  for k, v in inputs.items()}
    ds = tf.data.Dataset.from_tensor_slices(inputs).batch(batch_size)
    model = trainer.model
    cache = model.__dict__.setdefault("_real_length_outputs", {})
    kinds = real_length.output_kinds(lambda x: model(x, training=False), inputs, cache, type(
        model).__name__) if cuts_batches(trainer.options, strategy=trainer.strategy) else None
    if kinds is not None:
        ds = ds.map(real_length.cut_batch_fn(int(seq_length),
                                             step=real_length.step(seq_length, xla=False)))
    dist = trainer.strategy.experimental_distribute_dataset(ds)
    step = _predict_step(trainer, tuple(output_keys), dist.element_spec,
                         int(seq_length) if kinds is not None else None, kinds)
    iterator = iter(dist)
    with tqdm(total=n, desc=desc, unit="ex", disable=not trainer.options.progress,
              dynamic_ncols=True) as bar:
        for b in range(num_batches):
            keep = batch_size if b < num_batches - 1 else batch_size - pad
            out = {k: v.numpy()[:keep].astype(np.float32)
                   for k, v in step(next(iterator)).items()}
            bar.update(keep)
            yield out


def _predict_step(trainer, output_keys, element_spec, seq_length, kinds=None):
    """The compiled prediction step for batches of `element_spec` (cut ones: a None length);
    seq_length: pad the per-position outputs (keys `kinds`) back to it (None: no cut)."""
    import tensorflow as tf
    from bert_tf.modeling import real_length
    cache = trainer.__dict__.setdefault("_finetune_predict_steps", {})
    key = (output_keys, seq_length, kinds, repr(element_spec))
    if key not in cache:
        strategy, model = trainer.strategy, trainer.model
        values = real_length.padding_values(model)

        def replica(batch):
            out = model(batch, training=False)
            out = {k: out[k] for k in output_keys}
            if seq_length:  # back to S in the replica: replicas cut to different lengths
                out = real_length.restore_outputs(out, batch["input_mask"], values, seq_length,
                                                  kinds, tf.shape(batch["input_mask"])[1])
            return out

        @tf.function(input_signature=[element_spec], autograph=False)  # as evaluation.py
        def step(batch):
            out = strategy.run(replica, args=(batch,))
            return {k: strategy.gather(out[k], axis=0) for k in output_keys}

        cache[key] = step
    return cache[key]
