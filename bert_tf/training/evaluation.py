"""The Trainer's stat-based evaluation: the task's per-batch stats (sums) are reduced over
replicas and added up over the batches, then `task.summarize` turns them into the reported
means, so N replicas report what one device reports for the same batches. The chief records
each evaluation (`record`): eval_results.txt, eval summaries and one log line.
"""
import logging

import tensorflow as tf

from bert_tf import BertError
from bert_tf.training import summaries

log = logging.getLogger("bert_tf")


def eval_step_fn(strategy, model, task):
    """The compiled eval step: a distributed batch -> the task's stat sums over replicas.

    Args:
        strategy: the Trainer's tf.distribute.Strategy.
        model: the task's model.
        task: the `Task` (normalizers, loss, stat_keys, model_inputs).
    """
    def replica_eval(batch):
        ctx = tf.distribute.get_replica_context()
        norms = task.normalizers(batch)
        if ctx.num_replicas_in_sync > 1 and norms:
            norms = ctx.all_reduce(tf.distribute.ReduceOp.SUM, norms)
        outputs = task.forward(model, {k: batch[k] for k in task.model_inputs}, training=False)
        return task.loss(batch, outputs, norms)[1]

    # No AutoGraph, as the training loop: the task's code is plain TF ops (converting it only
    # costs tracing time, and fails on bert_tf models' zero-argument super()).
    @tf.function(autograph=False)
    def eval_step(batch):
        stats = strategy.run(replica_eval, args=(batch,))
        return {k: strategy.reduce(tf.distribute.ReduceOp.SUM, stats[k], axis=None)
                for k in task.stat_keys}

    return eval_step


def run_eval(step_fn, batches, task, max_steps, empty_error):
    """`task.summarize` of the stats of up to `max_steps` batches.

    Args:
        step_fn: `eval_step_fn`'s step.
        batches: a callable returning the distributed eval dataset (built inside the error
            handling: a bad record becomes the task's one-line BertError).
        task: the `Task`.
        max_steps: batches to evaluate at most.
        empty_error: BertError message when there is not a single full batch.
    """
    totals = {k: 0.0 for k in task.stat_keys}
    steps = 0
    try:
        for batch in batches():
            if steps >= max_steps:
                break
            for k, v in step_fn(batch).items():
                totals[k] += float(v)
            steps += 1
    except tf.errors.OpError as e:
        raise task.explain_data_error(e) or e from None
    if steps == 0:
        raise BertError(empty_error)
    return task.summarize(totals, steps)


def record(trainer, results, write_results=True):
    """The chief's record of one evaluation: eval_results.txt, eval summaries, a log line.

    Args:
        trainer: the `Trainer` (options.output_dir, task.eval_keys, write_results).
        results: `run_eval`'s metrics with "global_step".
        write_results: write eval_results.txt (False: the caller writes them).
    """
    keys, step = trainer.task.eval_keys, results["global_step"]
    if write_results:
        trainer.write_results(results)
    summaries.write_eval(trainer.options.output_dir, step, {k: results[k] for k in keys})
    log.info("eval at step %d: %s", step, " ".join(f"{k}={results[k]:.4f}" for k in keys))
