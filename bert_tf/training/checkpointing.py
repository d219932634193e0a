"""The trainer's checkpoints: what they hold, where they go, and how a run starts from one.

Checkpoints (`<checkpoint_name>-<step>` in output_dir) hold the model (under `model`), the
optimizer, `global_step`, the data seed and the dropout RNG states; a restart resumes from the
latest and the seeded input skips the batches consumed so far. Without one, `init_checkpoint`
(original TF1 or ours) initialises the model. Multi-worker: only the chief writes into
output_dir; the others save to a deleted temporary directory (saving may need every worker).

Faults: a newest checkpoint that cannot be read (the machine died while writing it, the disk
filled, a gs:// copy was cut short) is skipped with one warning and renamed to
`<file>.unreadable`; the run resumes from the newest readable one. The `checkpoint` state file
is not trusted alone (it can be missing, corrupt or name files that never arrived): the
`<checkpoint_name>-<step>` files are listed too. A save that fails is one BertError line and
leaves no partial files.
"""
import logging
import os
import re
import time

import tensorflow as tf

from bert_tf import BertError, fileio
from bert_tf.fileio import error_gist as _gist
from bert_tf.training import distribute

log = logging.getLogger("bert_tf")

STATE_FILE = "checkpoint"       # tf.train.CheckpointManager's list of checkpoints
UNREADABLE = ".unreadable"      # suffix of the files of a skipped checkpoint
# Read errors that mean the files are damaged; others (permissions, network) may pass, so they
# stop the run instead of making it fall back to an older checkpoint.
_DAMAGED = (tf.errors.DATA_LOSS, tf.errors.OUT_OF_RANGE, tf.errors.NOT_FOUND, tf.errors.UNKNOWN)


def dropout_rng_states(model):
    """The state variables of the model's dropout seed generators.

    Keras does not put them in TF checkpoints; without them a resumed run would draw other
    dropout masks than an uninterrupted one.

    Args:
        model: a built Keras model.
    """
    return [v for v in model.non_trainable_variables if "seed_generator" in v.path]


class Checkpoints:
    """Save and restore a trainer's state in output_dir.

    Args:
        options: `TrainerOptions` (output_dir, keep_checkpoint_max, init_checkpoint).
        checkpoint_name: file prefix of the checkpoints (the task's `checkpoint_name`).
        strategy: the tf.distribute.Strategy the model was built under.
        model: the built Keras model.
        global_step: int64 variable; also the checkpoint number.
        data_seed: int64 variable, the input pipeline's shuffle seed.
        init_source: the `bert_tf.convert.source.Source` the command read for
            init_checkpoint (`bert_tf.convert.handoff.hand_off`): loaded from, not read again;
            None: init_checkpoint is read when it is needed.
    """

    def __init__(self, options, checkpoint_name, strategy, model, global_step, data_seed,
                 init_source=None):
        self.options, self.checkpoint_name, self.strategy = options, checkpoint_name, strategy
        self.model, self.global_step, self.data_seed = model, global_step, data_seed
        self.init_source = init_source
        self.is_chief = distribute.is_chief(strategy)
        self.optimizer = None
        self.optional = {}  # name -> trackable restored only when a checkpoint has it
        self.restored_optional = set()  # the optional names the restored checkpoint had
        self.restored_prefix = None  # the checkpoint `restore()` resumed from
        self._manager = None

    def add_optional(self, name, trackable):
        """Save `trackable` under `name` too, and restore it from checkpoints that have it
        (those written before it existed restore without it; `restored_optional` says which).

        Args:
            name: its key in the checkpoint.
            trackable: a tf.Module (or other trackable) of variables.
        """
        self.optional[name] = trackable
        self._manager = None  # its checkpoint lacks the item

    def set_optimizer(self, optimizer):
        """Include `optimizer` (its slots and iterations) in later saves and restores.

        Args:
            optimizer: the optimizer `apply()`-ing the updates (the LossScaleOptimizer, if any).
        """
        self.optimizer = optimizer
        self._manager = None  # its checkpoint lacks the optimizer

    def checkpoint(self, optional=True):
        """A tf.train.Checkpoint of the state; its keys are the names of old checkpoints too.

        Args:
            optional: include the `add_optional` items.
        """
        items = dict(model=self.model, global_step=self.global_step, data_seed=self.data_seed,
                     dropout_rng=dropout_rng_states(self.model))
        if self.optimizer is not None:
            items["optimizer"] = self.optimizer
        if optional:
            items.update(self.optional)
        return tf.train.Checkpoint(**items)

    def manager(self):
        """The tf.train.CheckpointManager of output_dir (creates no file)."""
        if self._manager is None:
            self._manager = tf.train.CheckpointManager(
                self.checkpoint(), self.options.output_dir,
                max_to_keep=self.options.keep_checkpoint_max,
                checkpoint_name=self.checkpoint_name, step_counter=self.global_step)
        return self._manager

    def restore(self, inference=False):
        """Resume from the newest readable checkpoint in output_dir, else load init_checkpoint.

        An unreadable newest checkpoint (cut short, no .index, corrupt) is skipped with one
        warning and, by the chief, renamed to `<file>.unreadable` so it is never picked again;
        the `checkpoint` state file is rewritten to match. Checkpoints that exist but none
        readable, a read that may be transient (permissions, network) and a checkpoint of
        another model are a BertError: a run never silently starts from scratch.

        Args:
            inference: no optimizer state expected; warn when neither exists.
        Returns:
            "resumed", "initialized" or "fresh".
        """
        out = self.options.output_dir
        found, with_files, state = (_find_checkpoints(out, self.checkpoint_name) if out
                                    else ([], set(), "missing"))
        skipped = []
        for prefix in found:
            why = self._try_restore(prefix)
            if why is None:
                self.restored_prefix = prefix
                self._after_fallback(prefix, found, with_files, skipped, state)
                log.info("resumed from %s (step %d)", prefix, int(self.global_step.numpy()))
                return "resumed"
            skipped.append((prefix, why))
        if skipped:
            listed = "; ".join(f"{os.path.basename(p)}: {why}" for p, why in skipped)
            raise BertError(f"{out}: no readable checkpoint ({listed}): delete the "
                            f"{self.checkpoint_name}-* files and the checkpoint file to start "
                            "from scratch, or pass another --output_dir")
        if self.options.init_checkpoint:
            from bert_tf.convert.checkpoints import load_checkpoint
            with self.strategy.scope():
                load_checkpoint(self.model, self.init_source or self.options.init_checkpoint)
            log.info("initialised from %s", self.options.init_checkpoint)
            return "initialized"
        if inference:
            log.warning("no checkpoint in %s and no --init_checkpoint: predicting with random "
                        "weights", out)
        return "fresh"

    def _try_restore(self, prefix):
        # None when restored; else why the files are unusable (BertError when they may be fine).
        if not tf.io.gfile.exists(prefix + ".index"):
            return "no .index file" if _files_of(prefix) else "its files are missing"
        try:
            status = self.checkpoint(optional=False).restore(prefix)
            # The optional items come next; items this run has none of (a two-phase run's
            # record read by a one-phase eval or export) stay in the file.
            status.expect_partial()
            status.assert_existing_objects_matched()
            self._restore_optional(prefix)
        except IndexError as e:  # the checkpoint reader's "Read less bytes than requested"
            return _gist(e)
        except tf.errors.OpError as e:
            if e.error_code in _DAMAGED:
                return _gist(e)
            raise BertError(f"{prefix}: cannot read the checkpoint ({_gist(e)}); nothing was "
                            "changed: fix the access and rerun") from None
        except (ValueError, AssertionError) as e:
            raise BertError(f"{prefix}: does not fit the model ({_gist(e)[:200]}): resume with "
                            "the bert_config and task that wrote it, or pass another "
                            "--output_dir") from None
        return None

    def _restore_optional(self, prefix):
        keys = [name for name, _ in tf.train.list_variables(prefix)] if self.optional else []
        found = {n for n in self.optional if any(k.startswith(n + "/") for k in keys)}
        if found:
            status = tf.train.Checkpoint(**{n: self.optional[n] for n in found}).restore(prefix)
            status.expect_partial()
            status.assert_existing_objects_matched()
        self.restored_optional = found

    def _after_fallback(self, restored, found, with_files, skipped, state):
        # Moves the skipped checkpoints out of the way and makes the state file name `restored`
        # (the CheckpointManager continues from it, and a restart does not try them again).
        out = self.options.output_dir
        moved = False
        for prefix, _ in skipped if self.is_chief else ():
            for path in _files_of(prefix):
                try:
                    tf.io.gfile.rename(path, path + UNREADABLE, overwrite=True)
                    moved = True
                except tf.errors.OpError:
                    pass
        if skipped:
            names = ", ".join(f"{os.path.basename(p)} ({why})" for p, why in skipped)
            log.warning("%s: skipped unreadable checkpoint %s%s; resuming from %s", out, names,
                        f" (its files renamed to *{UNREADABLE})" if moved else "",
                        os.path.basename(restored))
        elif state in ("missing", "unreadable"):
            log.warning("%s: %s state file; resuming from %s, found by its files",
                        os.path.join(out, STATE_FILE), state, os.path.basename(restored))
        if self.is_chief and state != restored:
            bad = {p for p, _ in skipped}
            older = [p for p in reversed(found) if p in with_files and p not in bad]
            _write_state(out, restored, older[:older.index(restored) + 1])
            self._manager = None  # re-reads the state file

    def save(self):
        """Checkpoint `<checkpoint_name>-<step>` into output_dir (chief); its path or None.

        A failed write (disk full, no permission) is a BertError naming the checkpoint; its
        partial files are removed and the previous checkpoints stay as they were.
        """
        step = int(self.global_step.numpy())
        if not self.is_chief:
            with distribute.scratch_dir("bert_tf-worker-ckpt-") as tmp:
                try:
                    self.checkpoint().write(os.path.join(tmp, "ckpt"))
                except tf.errors.OpError as e:
                    raise BertError(f"{tmp}: cannot write this worker's copy of checkpoint "
                                    f"{step} ({_gist(e)})") from None
            return None
        out = self.options.output_dir
        prefix = os.path.join(out, f"{self.checkpoint_name}-{step}")
        existed, previous = False, None
        try:
            tf.io.gfile.makedirs(out)
            existed = tf.io.gfile.exists(prefix + ".index")
            previous = self.manager().latest_checkpoint
            return self.manager().save(checkpoint_number=step)
        except tf.errors.OpError as e:
            self._manager = None  # it may count the failed checkpoint as saved
            _remove_partial(out, prefix, existed)
            kept = (f"{os.path.basename(previous)} is intact" if previous
                    else "no earlier checkpoint")
            raise BertError(f"{prefix}: cannot write the checkpoint ({_gist(e)}); {kept}") \
                from None


def _step_of(prefix):
    m = re.search(r"-(\d+)$", prefix)
    return int(m.group(1)) if m else -1


def _files_of(prefix):
    """The `.index` and `.data-*` files of checkpoint `prefix` (not our `*.unreadable`)."""
    data = re.compile(re.escape(prefix) + r"\.data-\d+-of-\d+$")
    return ([p for p in tf.io.gfile.glob(prefix + ".data-*") if data.match(p)]
            + tf.io.gfile.glob(prefix + ".index"))


def _find_checkpoints(out, name):
    """The checkpoints of `out`, newest step first, as (prefixes, prefixes with files,
    state) where state is the state file's latest prefix, "missing" or "unreadable".

    The prefixes are those the state file lists plus every `<name>-<step>` with files.
    """
    if not tf.io.gfile.isdir(out):
        return [], set(), "missing"
    own = re.compile(re.escape(name) + r"-\d+(?=\.(?:index|data-\d+-of-\d+)$)")
    with_files = {os.path.join(out, m.group(0))
                  for m in map(own.match, tf.io.gfile.listdir(out)) if m}
    listed, state = [], "missing"
    if tf.io.gfile.exists(os.path.join(out, STATE_FILE)):
        tf_log = tf.get_logger()
        level = tf_log.level
        tf_log.setLevel(logging.ERROR)  # its parse warnings: ours is one line
        try:
            proto = tf.train.get_checkpoint_state(out)
        except ValueError:  # no model_checkpoint_path
            proto = None
        finally:
            tf_log.setLevel(level)
        if proto is None:
            state = "unreadable"
        else:
            listed = list(proto.all_model_checkpoint_paths) + [proto.model_checkpoint_path]
            state = proto.model_checkpoint_path
    with_files.update(p for p in set(listed) - with_files if _files_of(p))
    order = {p: i for i, p in enumerate(listed)}
    found = sorted(with_files | set(listed), key=lambda p: (_step_of(p), order.get(p, -1)),
                   reverse=True)
    return found, with_files, state


def _write_state(out, latest, prefixes):
    """Rewrites the state file as tf.train.CheckpointManager does: relative names, oldest first,
    with timestamps (without them the manager would never delete the old checkpoints)."""
    from google.protobuf import text_encoding

    def quoted(p):
        rel = os.path.basename(p) if os.path.dirname(p) == out.rstrip("/") else p
        return '"' + text_encoding.CEscape(rel, as_utf8=False) + '"'

    now, n = time.time(), len(prefixes)
    lines = [f"model_checkpoint_path: {quoted(latest)}"]
    lines += [f"all_model_checkpoint_paths: {quoted(p)}" for p in prefixes]
    lines += [f"all_model_checkpoint_timestamps: {now - n + i:.6f}" for i in range(n)]
    lines.append(f"last_preserved_timestamp: {now - n - 1:.6f}")
    try:
        fileio.write_text_atomic(os.path.join(out, STATE_FILE), "\n".join(lines) + "\n")
    except BertError as e:  # an unwritable output_dir is reported by the next save
        log.warning("%s", e)


def _remove_partial(out, prefix, existed):
    """Deletes what a failed save of `prefix` left: TF's `<prefix>_temp` folder, the state
    file's temp copies and, unless `prefix` was a checkpoint before, its files."""
    paths = tf.io.gfile.glob(prefix + "_temp*")
    paths += tf.io.gfile.glob(os.path.join(out, STATE_FILE + ".tmp*"))
    if not existed:
        paths += _files_of(prefix)
    for path in paths:
        try:
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            else:
                tf.io.gfile.remove(path)
        except tf.errors.OpError:
            pass  # e.g. a read-only folder: nothing could have been written there either
