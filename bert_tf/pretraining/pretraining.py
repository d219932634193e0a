"""Pre-training (masked LM + next sentence) as a Task of the one trainer; run_pretraining.py.

Loss = masked-LM weighted mean over the real predictions, sum(w * ce) / (sum(w) + 1e-5), plus the
NSP mean, both over the *global* batch: `normalizers()` gives the weight sum and the example
count, which the trainer sums over replicas before `loss()` divides by them. Packed records
(several sequences a row, bert_tf.pretraining.packed_records) count their real sequences
(next_sentence_weights) as examples and read their weights as `> 0` (the packed-BERT layout
writes each prediction's sequence index there), so both kinds give the same losses for the same
sequences. Strategy, accumulation, mixed precision, XLA: bert_tf.training.trainer; checkpoints
and resume: bert_tf.training.checkpointing.
"""
import dataclasses

import tensorflow as tf

from bert_tf import BertError
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.models import BertPretrainer, build_model
from bert_tf.pretraining import packed_records, phase_plan, phases, preflight, record_checks
from bert_tf.pretraining.input_pipeline import list_files, pretraining_dataset
from bert_tf.pretraining.losses import sparse_softmax_cross_entropy
from bert_tf.pretraining.options import PretrainingOptions  # noqa: F401  (API)
from bert_tf.training.task import Task
from bert_tf.training.trainer import Trainer

STAT_KEYS = ("loss", "mlm_loss_sum", "mlm_weight", "mlm_correct", "nsp_loss_sum", "nsp_correct",
             "examples")
EVAL_KEYS = ("global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
             "next_sentence_accuracy", "next_sentence_loss")
MODEL_INPUTS = ("input_word_ids", "input_mask", "input_type_ids", "masked_lm_positions")


def pretraining_losses(outputs, batch, mlm_weight_total, global_batch_size):
    """This replica's share of the global loss, and its metric sums.

    Args:
        outputs: the BertPretrainer's outputs (mlm_logits, nsp_logits).
        batch: the replica's batch (masked_lm_ids/weights, next_sentence_labels).
        mlm_weight_total: sum of masked_lm_weights over the whole global batch.
        global_batch_size: examples in the global batch.
    Returns:
        (loss, stats); summing `loss` over replicas gives sum(w * ce) / (sum(w) + 1e-5) +
        mean(nsp ce) of the global batch, as the original.
    """
    logits = tf.cast(outputs["mlm_logits"], tf.float32)
    labels = batch["masked_lm_ids"]
    weights = _mlm_weights(batch)
    ce, mlm_hit = sparse_softmax_cross_entropy(labels, logits, with_hits=True)
    mlm_sum = tf.reduce_sum(weights * ce)
    nsp_logits = tf.cast(outputs["nsp_logits"], tf.float32)
    nsp_labels = batch["next_sentence_labels"]
    nsp_ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=nsp_labels, logits=nsp_logits)
    nsp_hit = tf.cast(tf.equal(tf.argmax(nsp_logits, -1, output_type=tf.int32), nsp_labels),
                      tf.float32)
    if "next_sentence_weights" in batch:  # packed [B, N]: only the real sequences count
        nsp_weights = tf.cast(batch["next_sentence_weights"] > 0, tf.float32)
        nsp_ce, nsp_hit = nsp_weights * nsp_ce, nsp_weights * nsp_hit
        examples = tf.reduce_sum(nsp_weights)
    else:
        examples = tf.cast(tf.shape(nsp_labels)[0], tf.float32)
    nsp_sum = tf.reduce_sum(nsp_ce)
    # global_batch_size: the global batch's real sequences (packed: sum of nsp weights).
    loss = mlm_sum / (tf.cast(mlm_weight_total, tf.float32) + 1e-5) \
        + nsp_sum / tf.cast(global_batch_size, tf.float32)
    stats = {"loss": loss, "mlm_loss_sum": mlm_sum, "mlm_weight": tf.reduce_sum(weights),
             "mlm_correct": tf.reduce_sum(weights * mlm_hit), "nsp_loss_sum": nsp_sum,
             "nsp_correct": tf.reduce_sum(nsp_hit), "examples": examples}
    return loss, stats


def _mlm_weights(batch):
    """float32 masked-LM weights: ordinary records' as written, packed ones' as `> 0` (1, 2, 3 =
    the prediction's sequence; a weight of 2 must not count twice)."""
    weights = batch["masked_lm_weights"]
    if "next_sentence_weights" in batch:
        return tf.cast(weights > 0, tf.float32)
    return tf.cast(weights, tf.float32)


def summarize(totals, steps):
    """Metric sums of a loop (or an eval) -> the reported means.

    Args:
        totals: sums of the STAT_KEYS stats over replicas and steps.
        steps: number of steps summed (the loss is a per-step value).
    """
    w = max(totals["mlm_weight"], 1e-12)
    n = max(totals["examples"], 1e-12)
    return {"loss": totals["loss"] / max(steps, 1),
            "masked_lm_loss": totals["mlm_loss_sum"] / w,
            "masked_lm_accuracy": totals["mlm_correct"] / w,
            "next_sentence_loss": totals["nsp_loss_sum"] / n,
            "next_sentence_accuracy": totals["nsp_correct"] / n}


class PretrainingTask(Task):
    """Masked LM + next sentence prediction on create_pretraining_data.py's TFRecords.

    Args:
        bert_config: the model's BertConfig.
        options: PretrainingOptions.
        packed: whether the run's records are packed (`records_are_packed`), decided once
            (per phase): the model's inputs follow it, and a dataset of the other kind is an
            error.
        init_source: the `Source` read for init_checkpoint (the export's pooling), or None.
        run_log: the run's `preflight.RunLog` (each pre-flight line once); None: a new one.

    Attributes:
        options: the current phase's options (`set_phase`); run_options: the run's.
        phase_record: the `phases.PhaseRecord` of the trainer's checkpoints (make_trainer;
            None for one phase).
        export_seq_length: the export's longest text length (None: the run's longest phase;
            an eval- or export-only run sets it from the checkpoint's phase record).
    """
    checkpoint_name = "model.ckpt"
    stat_keys = STAT_KEYS
    eval_keys = EVAL_KEYS[1:]

    def __init__(self, bert_config, options, packed=False, init_source=None, run_log=None):
        self.config, self.options, self.run_options = bert_config, options, options
        self.packed = bool(packed)
        self.init_source = init_source  # the Source read for init_checkpoint: the export's pooling
        self.run_log = preflight.RunLog() if run_log is None else run_log
        self.label = None  # "phase 2": said by the pre-flight lines of a two-phase run
        self.phase_record = None
        self.export_seq_length = None

    def set_phase(self, phase):
        """Read `phase`'s data from now on: its lengths, and its record kind (two phases
        decide it per phase).

        Args:
            phase: a phase_plan.Phase.
        """
        self.options, self.label = phase.options, phase.label
        if phase.of > 1:
            self.packed = records_are_packed(phase.options.input_file)

    @property
    def model_inputs(self):
        """The batch keys the model takes: MODEL_INPUTS, plus positions for packed records."""
        return MODEL_INPUTS + (packed_records.MODEL_INPUTS if self.packed else ())

    def build_model(self):
        """The BertPretrainer (encoder named `encoder`), built."""
        return build_model(BertPretrainer(BertEncoder.from_bert_config(self.config, name="encoder")))

    def forward(self, model, inputs, training):
        """The BertPretrainer's logits with its last block run only where the heads read
        (`BertPretrainer.pretraining_logits`: the work of L - 1 blocks and a few rows).

        Args:
            model: the BertPretrainer.
            inputs: the batch's `model_inputs`.
            training: dropout on (True) or off.
        """
        return model.pretraining_logits(inputs, training=training)

    def check(self, options, num_replicas):
        """BertError for step counts, lengths or mask_id that cannot work with the config.

        Args:
            options: PretrainingOptions.
            num_replicas: replicas in sync.
        """
        o = options
        for name in ("num_train_steps", "max_seq_length", "max_predictions_per_seq"):
            if getattr(o, name) <= 0:
                raise BertError(f"--{name}: must be > 0, got {getattr(o, name)}")
        if o.eval_batch_size <= 0 or o.eval_batch_size % num_replicas:
            raise BertError(f"--eval_batch_size: {o.eval_batch_size} is not divisible by the "
                            f"{num_replicas} replicas")
        if o.max_seq_length > self.config.max_position_embeddings:
            raise BertError(f"--max_seq_length: {o.max_seq_length} exceeds the config's "
                            f"max_position_embeddings {self.config.max_position_embeddings}")
        if o.dynamic_masking and not 0 <= o.mask_id < self.config.vocab_size:
            raise BertError(f"--mask_id: {o.mask_id} is not in the vocabulary "
                            f"(vocab_size {self.config.vocab_size})")
        phase_plan.check(o, self.config.max_position_embeddings)
        if phase_plan.two_phases(o):
            batch = phase_plan.phases(o)[1].options.train_batch_size
            if batch % num_replicas or (batch // num_replicas) % o.grad_accum_steps:
                raise BertError(f"--phase2_train_batch_size: {batch} is not divisible by the "
                                f"{num_replicas} replicas x --grad_accum_steps="
                                f"{o.grad_accum_steps}")

    def normalizers(self, batch):
        """The batch's masked-LM weight sum and count of real sequences (summed over
        replicas): packed rows count the sequences they hold, so packed and unpacked runs over
        the same sequences have the same loss."""
        if "next_sentence_weights" in batch:
            examples = tf.reduce_sum(tf.cast(batch["next_sentence_weights"] > 0, tf.float32))
        else:
            examples = tf.cast(tf.shape(batch["next_sentence_labels"])[0], tf.float32)
        return {"mlm_weight": tf.reduce_sum(_mlm_weights(batch)), "examples": examples}

    def loss(self, batch, outputs, normalizers):
        """`pretraining_losses` with the global batch's normalizers.

        Args:
            batch: the replica's (micro-)batch.
            outputs: the BertPretrainer's outputs.
            normalizers: `normalizers()` summed over the global batch.
        """
        return pretraining_losses(outputs, batch, normalizers["mlm_weight"],
                                  normalizers["examples"])

    def summarize(self, totals, steps):
        """The module's `summarize`.

        Args:
            totals: sums of the STAT_KEYS stats.
            steps: number of steps summed.
        """
        return summarize(totals, steps)

    def rates(self, totals, seconds):
        """`sequences_per_second`: real sequences trained per second (a packed row holds
        several), the one throughput that means the same packed or not.

        Args:
            totals: the loop's STAT_KEYS sums.
            seconds: the loop's wall-clock time.
        """
        return {"sequences_per_second": totals["examples"] / max(seconds, 1e-9)}

    def log_text(self, m):
        """Loss, masked-LM and NSP loss/accuracy for the training log line (the trainer adds
        `rates`' sequences/s)."""
        return (f"loss={m['loss']:.4f} mlm_loss={m['masked_lm_loss']:.4f} "
                f"mlm_acc={m['masked_lm_accuracy']:.4f} nsp_loss={m['next_sentence_loss']:.4f} "
                f"nsp_acc={m['next_sentence_accuracy']:.4f}")

    def dataset_fn(self, input_file, training, flag="--input_file"):
        """The trainer's dataset_fn over input_file (see Trainer.distribute), at the current
        phase's lengths.

        Args:
            input_file: comma-separated TFRecord files or globs.
            training: shuffle, repeat and (with dynamic_masking) mask on the fly.
            flag: the flag the files came from, named in errors.
        """
        o = self.options

        def fn(ctx, batch_size, seed, skip_batches):
            return pretraining_dataset(
                input_file, batch_size, o.max_seq_length, o.max_predictions_per_seq, training,
                input_context=ctx, seed=seed, dynamic_masking=o.dynamic_masking and training,
                vocab_size=self.config.vocab_size, mask_id=o.mask_id, skip_batches=skip_batches,
                type_vocab_size=self.config.type_vocab_size,
                skip_corrupt_records=o.skip_corrupt_records, packed=self.packed, flag=flag,
                run_log=self.run_log, preflight_label=self.label)
        return fn

    def explain_data_error(self, error):
        """`record_checks.explain_data_error`: a bad record's one-line BertError, or None.

        Args:
            error: the tf.errors.OpError of a training or eval loop.
        """
        return record_checks.explain_data_error(error)

    def export(self, model, export_dir):
        """`pretraining_export.export_pretrained` of the model; the path written.

        Args:
            model: the trained BertPretrainer.
            export_dir: where to export.
        """
        from bert_tf.pretraining import pretraining_export
        # Text-in exports take up to the longest length trained (phase 2's).
        longest = self.export_seq_length or max(
            p.options.max_seq_length for p in phase_plan.phases(self.run_options))
        options = dataclasses.replace(self.options, max_seq_length=longest)
        return pretraining_export.export_pretrained(model, export_dir, options,
                                                    self.init_source)


def records_are_packed(input_file):
    """Whether the first readable record of `input_file` (comma-separated files or globs) is a
    packed one; False when none is readable (pre-flight then names the problem).

    Args:
        input_file: the --input_file pattern.
    """
    fmt = packed_records.record_format(list_files(input_file))
    return bool(fmt and fmt["packed"])


def make_trainer(bert_config, options, strategy=None, packed=None, init_source=None,
                 run_log=None):
    """A Trainer of the PretrainingTask with its optimizer built and its checkpoints holding
    the phase record (`phases.attach`; ready for `restore()`).

    Args:
        bert_config: BertConfig.
        options: PretrainingOptions (output_dir set).
        strategy: a tf.distribute.Strategy; default: from options.
        packed: whether phase 1's records are packed; None: decided from options.input_file's
            records (False without one).
        init_source: the `Source` read for options.init_checkpoint (see Trainer), or None.
        run_log: the run's `preflight.RunLog`, or None.
    """
    if packed is None:
        packed = bool(options.input_file) and records_are_packed(options.input_file)
    task = PretrainingTask(bert_config, options, packed, init_source, run_log)
    trainer = Trainer(task, options, strategy, init_source=init_source)
    task.phase_record = phases.attach(trainer, options)
    return trainer


def run_pretraining(options, strategy=None, init_source=None, run_log=None):
    """What run_pretraining.py does: train and/or evaluate (each phase: phases.run); export
    after training.

    Without do_train/do_eval but with export_dir it is the separate export step: the latest
    checkpoint in output_dir (else --init_checkpoint) is exported to export_dir.

    Args:
        options: PretrainingOptions.
        strategy: a tf.distribute.Strategy; default: from options.
        init_source: the `Source` the command read for --init_checkpoint
            (`bert_tf.convert.handoff`; loaded from, not read again), or None.
        run_log: the `preflight.RunLog` of the command's pre-flight (its lines are not logged
            again); None: this run's own.
    Returns:
        {"train": [per-loop metrics], "eval": the last phase's results or None,
        "eval_phases": {phase: results} (two phases) or None, "export_dir": path or None}.
    """
    o = options
    run_log = preflight.RunLog() if run_log is None else run_log
    if not o.bert_config_file:
        raise BertError("--bert_config_file: required")
    if not o.output_dir:
        raise BertError("--output_dir: required")
    if not o.do_train and not o.do_eval and not o.export_dir:
        raise BertError("--do_train/--do_eval/--export_dir: at least one must be set")
    if (o.do_train or o.do_eval) and not o.input_file:
        raise BertError("--input_file: required")
    from bert_tf.convert.handoff import bert_config as config_of
    config = config_of(o, init_source)  # any dialect the format table reads: not read again
    phase_plan.check(o, config.max_position_embeddings)
    if o.do_train or o.export_dir:
        from bert_tf.pretraining import pretraining_export
        pretraining_export.check_vocab(o, config)
    if o.do_train or o.do_eval:
        list_files(o.input_file)
        if phase_plan.two_phases(o):  # phase 2's records too, before anything is written
            from bert_tf.pretraining.preflight_run import check_phases
            check_phases(o, run_log, config.vocab_size, config.type_vocab_size)
    packed = (o.do_train or o.do_eval) and records_are_packed(o.input_file)  # once, here
    if o.do_eval:  # eval files of the other kind would fail only after the phase trained
        for phase in phase_plan.phases(o):
            first = packed if phase.number == 1 else records_are_packed(phase.options.input_file)
            if phase.eval_files != phase.options.input_file:
                problem = phase_plan.kind_mismatch(phase, first,
                                                   records_are_packed(phase.eval_files),
                                                   phase.eval_files)
                if problem:
                    raise BertError(problem)
    trainer = make_trainer(config, o, strategy, packed=packed, init_source=init_source,
                           run_log=run_log)
    restored = trainer.restore()
    task = trainer.task
    phases.after_restore(trainer, o, restored, o.do_train)
    out = {"train": [], "eval": None, "eval_phases": None, "export_dir": None}
    two = phase_plan.two_phases(o)
    if o.do_train or o.do_eval:
        # One phase: train, export, then eval (too little eval data must not cost the export).
        out["train"], evals = phases.run(trainer, task.phase_record, o, o.do_train,
                                         o.do_eval and two)
        if o.do_train and not two:
            out["export_dir"] = trainer.export()
        if o.do_eval and not two:
            evals = {1: phases.evaluate(trainer, phase_plan.phases(o)[0])}
        if evals:
            out["eval"] = evals[max(evals)]
            out["eval_phases"] = evals if two else None
    if o.do_train and two:
        out["export_dir"] = trainer.export()
    elif o.export_dir and not o.do_train:
        if restored == "fresh":
            raise BertError(f"--output_dir={o.output_dir}: no checkpoint to export (and no "
                            "--init_checkpoint)")
        out["export_dir"] = trainer.export()
    return out
