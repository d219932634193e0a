"""What the trainer reports while it trains: one log line per loop (the curve a person reads),
TensorBoard scalars and the progress bar; and how long a loop is.

A loop (one call of the compiled training loop) is also the logging unit: metrics reach Python
only between loops. On TPUs a loop of `iterations_per_loop` steps saves the host round trips,
so it is kept. On CPUs and GPUs a round trip per loop costs nothing measurable, so a loop is
at most a tenth of the run: any run of more than a few steps logs at least ~10 lines.
"""
import logging
import math

from bert_tf import BertError
from bert_tf.progress import bar as progress_bar
from bert_tf.training import summaries

log = logging.getLogger("bert_tf")

LINES_PER_RUN = 10  # off TPU: progress lines a run logs at least (when it has the steps)


def loop_steps(iterations_per_loop, num_train_steps, on_tpu):
    """Steps per call of the compiled training loop.

    Args:
        iterations_per_loop: the flag.
        num_train_steps: steps of the whole run.
        on_tpu: TPUs keep `iterations_per_loop` (host round trips are costly there).
    """
    if on_tpu:
        return iterations_per_loop
    return max(1, min(iterations_per_loop, num_train_steps // LINES_PER_RUN))


class Report:
    """The reporting of one `Trainer.train` call: `loop()` after each loop, `close()` at the end.

    Args:
        trainer: the `Trainer` (its task, options, step, optimizer).
        step: the global step training starts from.
    """

    def __init__(self, trainer, step):
        self.trainer = trainer
        o = trainer.options
        self.writer = summaries.writer(o.output_dir, trainer.is_chief)
        self.bar = progress_bar(total=trainer.num_train_steps, initial=step, desc="train",
                                unit="step", disable=not o.progress, dynamic_ncols=True)

    def loop(self, totals, n, elapsed):
        """One loop's metrics: checked, logged, summarised and on the bar; returns them.

        Args:
            totals: the loop's stats summed over replicas and steps.
            n: steps the loop ran.
            elapsed: its seconds.
        """
        t = self.trainer
        m, step, total = t.task.summarize(totals, n), t.step, t.num_train_steps
        if not math.isfinite(m["loss"]):
            raise BertError(f"training diverged at step {step}: loss {m['loss']} "
                            "(lower --learning_rate?)")
        m.update(step=step, learning_rate=t.learning_rate(),
                 examples_per_second=n * t.options.train_batch_size / max(elapsed, 1e-9))
        rates = t.task.rates(totals, elapsed)  # e.g. pre-training's sequences/s (issue 33)
        m.update(rates)
        # The task's own throughput where it has one (a packed row is several sequences).
        rate_text = " ".join(f"{k.replace('_per_second', '/s')}={v:.1f}" for k, v in rates.items())
        rate_text = rate_text or f"examples/s={m['examples_per_second']:.1f}"
        if t.loss_scaling:
            m["loss_scale"] = float(t.optimizer.dynamic_scale.numpy())
        summaries.write_scalars(self.writer, step, {k: v for k, v in m.items() if k != "step"})
        left = (total - step) * elapsed / n
        log.info("step %d/%d %s lr=%.3g %s left=%dm%02ds", step, total, t.task.log_text(m),
                 m["learning_rate"], rate_text, left // 60, left % 60)
        self.bar.set_postfix(loss=f"{m['loss']:.4f}", refresh=False)
        self.bar.update(n)
        return m

    def close(self):
        """Close the bar and flush the summaries."""
        self.bar.close()
        self.writer.flush()
