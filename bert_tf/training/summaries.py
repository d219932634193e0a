"""The trainer's TensorBoard summaries: training metrics in output_dir, eval metrics in
output_dir/eval. Only the chief writes; the other workers get no-op writers."""
import posixpath

import tensorflow as tf


def writer(logdir, is_chief=True):
    """A summary writer for `logdir` (created) on the chief, a no-op writer elsewhere.

    Args:
        logdir: directory of the event file.
        is_chief: False on the non-chief workers of a multi-worker job.
    """
    if not is_chief:
        return tf.summary.create_noop_writer()
    tf.io.gfile.makedirs(logdir)
    return tf.summary.create_file_writer(logdir)


def write_scalars(summary_writer, step, scalars):
    """One scalar summary per item (its key is the tag), at `step`.

    Args:
        summary_writer: from `writer()`.
        step: the global step.
        scalars: dict of tag -> number.
    """
    with summary_writer.as_default(step=step):
        for key, value in scalars.items():
            tf.summary.scalar(key, value)


def write_eval(output_dir, step, scalars):
    """The eval summaries at `step` into output_dir/eval, flushed (call on the chief).

    Args:
        output_dir: the run's output directory.
        step: the global step evaluated.
        scalars: dict of tag -> number.
    """
    eval_writer = writer(posixpath.join(output_dir, "eval"))
    write_scalars(eval_writer, step, scalars)
    eval_writer.flush()
