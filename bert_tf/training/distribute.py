"""tf.distribute strategies and mixed-precision policies for training.

`get_strategy(name)` returns a strategy for one of
  "one_device"   the first GPU, else the CPU
  "mirrored"     all local GPUs; without GPUs the logical CPU devices when there are several
                 (tests split the CPU in two), else the CPU
  "multi_worker" MultiWorkerMirroredStrategy; one process per host, the cluster and this
                 process's task from the TF_CONFIG environment variable, e.g.
                 {"cluster": {"worker": ["host1:12345", "host2:12345"]},
                  "task": {"type": "worker", "index": 0}}
                 (worker 0, or a "chief" task, writes checkpoints, summaries and exports)
  "tpu"          TPUClusterResolver(tpu, zone, project) -> connect -> initialize -> TPUStrategy
  "auto"         tpu is never guessed; "mirrored" when there are several GPUs, else "one_device"
The training loop is written once against `tf.distribute.Strategy`, so every name runs the same
code path.
"""
import contextlib
import glob
import itertools
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import urllib.error

import keras
import tensorflow as tf

from bert_tf import BertError, fileio

STRATEGIES = ("one_device", "mirrored", "multi_worker", "tpu", "auto")
PRECISIONS = {"none": "float32", "float32": "float32",
              "float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}  # + "auto"


def _local_tpu_present():
    # A Cloud TPU VM exposes its chips as device files; a TPU node is reached by name instead.
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


# Looking a TPU up asks the GCE metadata server and the Cloud TPU API over HTTP, with no timeout
# of their own: off Google Cloud an address that resolves but never answers would hang the job.
TPU_LOOKUP_TIMEOUT_S = 30


@contextlib.contextmanager
def _socket_timeout(seconds):
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def _tpu_error(tpu, zone, project, error):
    """The one line for a TPU that cannot be reached: what failed and which flag to check."""
    reason = getattr(error, "reason", None)  # URLError wraps the socket error
    gist = str(reason) if isinstance(error, urllib.error.URLError) and reason else \
        fileio.error_gist(error)
    what = f"{type(error).__name__}: {gist.split('. ')[0]}"[:300]
    unset = [flag for flag, value in (("--tpu_zone", zone), ("--gcp_project", project))
             if not value]
    kind = type(error).__name__
    if isinstance(error, (urllib.error.URLError, TimeoutError)) and unset:
        hint = (f"pass {' and '.join(unset)} (no Google Cloud metadata server answers here to "
                "look them up)")
    elif "Credentials" in kind or "auth" in kind.lower():
        hint = "no Google Cloud credentials here (set GOOGLE_APPLICATION_CREDENTIALS)"
    elif "404" in str(error) or "not found" in str(error).lower():
        hint = "no such TPU: check --tpu_name, --tpu_zone and --gcp_project"
    else:
        hint = "check --tpu_name, --tpu_zone and --gcp_project"
    return (f"--tpu_name={tpu}: cannot reach the TPU ({what}): {hint}, or run the job on the "
            "TPU VM itself")


def _tpu_strategy(tpu_name=None, tpu_zone=None, gcp_project=None):
    tpu = tpu_name or os.environ.get("TPU_NAME")
    if not tpu and not _local_tpu_present():
        raise BertError("--use_tpu: no TPU found (no --tpu_name, no TPU_NAME and no local TPU "
                        "devices)")
    try:
        with _socket_timeout(TPU_LOOKUP_TIMEOUT_S):
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
                tpu=tpu or "local", zone=tpu_zone, project=gcp_project)
            if tpu and tpu != "local":
                tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except BertError:
        raise
    except Exception as e:  # noqa: BLE001  URLError, HttpError, credentials, OpError...: one line
        raise BertError(_tpu_error(tpu or "local", tpu_zone, gcp_project, e)) from None


# TF keys every collective all-reduce by (group key, instance key) and caches each key's shape for
# the life of the process, while every Mirrored/MultiWorkerMirrored strategy numbers its keys from
# 1. A second strategy in the same process (fine-tuning after pre-training, a notebook re-run, a
# test suite) that all-reduces another shape under a reused key aborts with "Shape mismatch in
# the collective instance 100". Each strategy built here gets its own block of group keys.
_KEY_BLOCK = 1000
_key_blocks = itertools.count(1)


class _MirroredStrategy(tf.distribute.MirroredStrategy):
    def __init__(self, devices=None, cross_device_ops=None):
        self._collective_key_base = next(_key_blocks) * _KEY_BLOCK  # read by the extended
        super().__init__(devices, cross_device_ops)


class _MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    def __init__(self, cluster_resolver=None, communication_options=None):
        # All workers build their strategies in the same order, so the keys agree across them.
        self._collective_key_base = next(_key_blocks) * _KEY_BLOCK
        super().__init__(cluster_resolver, communication_options)


def _check_tf_config():
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise BertError("--strategy=multi_worker: TF_CONFIG is not set (it names the cluster's "
                        "workers and this process's task)")
    try:
        conf = json.loads(raw)
        cluster, task = conf["cluster"], conf["task"]
        members = cluster[task["type"]]
        index = int(task["index"])
        if not 0 <= index < len(members):
            raise IndexError(index)
    except (ValueError, KeyError, TypeError, IndexError):
        raise BertError("TF_CONFIG: expected JSON {\"cluster\": {\"worker\": [\"host:port\", "
                        "...]}, \"task\": {\"type\": \"worker\", \"index\": i}} with the task "
                        "in the cluster") from None


def _mirrored_devices():
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        return [d.name for d in gpus]
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def get_strategy(name="one_device", tpu_name=None, tpu_zone=None, gcp_project=None):
    """A tf.distribute.Strategy by name (see the module docstring). Unknown name -> BertError.

    Args:
        name: one of STRATEGIES (None: "auto").
        tpu_name: TPU name or address for "tpu" (default: $TPU_NAME, or a local TPU).
        tpu_zone: GCE zone of the TPU.
        gcp_project: GCP project of the TPU.
    """
    name = (name or "auto").lower()
    if name not in STRATEGIES:
        raise BertError(f"--strategy: unknown strategy {name!r}; expected one of "
                        f"{', '.join(STRATEGIES)}")
    if name == "auto":
        name = "mirrored" if len(tf.config.list_logical_devices("GPU")) > 1 else "one_device"
    if name == "tpu":
        return _tpu_strategy(tpu_name, tpu_zone, gcp_project)
    if name == "multi_worker":
        _check_tf_config()
        return _MultiWorkerMirroredStrategy()
    if name == "mirrored":
        return _MirroredStrategy(devices=_mirrored_devices())
    gpus = tf.config.list_logical_devices("GPU")
    return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")


def is_chief(strategy):
    """True for the process that writes checkpoints, summaries and exports (always, except on
    the non-chief workers of a multi-worker cluster)."""
    return bool(strategy.extended.should_checkpoint)


@contextlib.contextmanager
def scratch_dir(prefix):
    """A temporary directory, deleted on exit: where non-chief workers save what only the chief
    keeps (saving may need every worker).

    Args:
        prefix: of the directory's name.
    """
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def set_mixed_precision(precision="none", strategy=None):
    """Set the global Keras dtype policy ("none"|"float16"|"bfloat16"|"auto"); returns the
    policy name.

    Call it before building the model. "auto" is bfloat16 where the hardware computes it fast
    (bert_tf.training.precision: TPU, GPU >= sm80, CPU with avx512_bf16/AMX), else float32; the
    choice and its reason are logged. float16 training also needs loss scaling, which the
    training loop adds (keras LossScaleOptimizer) when this policy is active.

    Args:
        precision: the --mixed_precision value.
        strategy: the run's strategy (its devices decide "auto"), or None (the visible devices).
    """
    key = (precision or "none").lower()
    if key not in PRECISIONS and key != "auto":
        raise BertError(f"--mixed_precision: unknown value {precision!r}; expected one of "
                        "none, float16, bfloat16, auto")
    if key == "auto":
        from bert_tf.training import precision as auto
        key, reason = auto.resolve(key, strategy)
        logging.getLogger("bert_tf").info(
            "--mixed_precision=auto: %s (%s)", "bfloat16" if key == "bfloat16" else "float32",
            reason)
    policy = PRECISIONS[key]
    keras.mixed_precision.set_dtype_policy(policy)
    return policy


def split_cpu(num_devices=2):
    """Split the host CPU into `num_devices` logical devices (before TF initialises its devices).

    Lets MirroredStrategy be exercised without GPUs. Returns False if TF was already initialised.
    """
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])
        return True
    except RuntimeError:
        return len(tf.config.list_logical_devices("CPU")) >= num_devices


def is_tpu(strategy):
    """True for a TPUStrategy (XLA compiles every step there anyway)."""
    return isinstance(strategy, (tf.distribute.TPUStrategy,
                                 tf.distribute.experimental.TPUStrategy))


def strategy_from_options(options):
    """The strategy `options` name (strategy, use_tpu, tpu_name/master, tpu_zone, gcp_project).

    Args:
        options: TrainerOptions (or anything with those attributes).
    """
    use_tpu = getattr(options, "use_tpu", False)
    name = getattr(options, "strategy", None)
    if use_tpu and name not in (None, "tpu"):
        raise BertError(f"--use_tpu: conflicts with --strategy={name}")
    name = "tpu" if use_tpu else (name or "auto")
    tpu_name = getattr(options, "tpu_name", None) or getattr(options, "master", None)
    strategy = get_strategy(name, tpu_name, getattr(options, "tpu_zone", None),
                            getattr(options, "gcp_project", None))
    cores = getattr(options, "num_tpu_cores", None)
    if name == "tpu" and cores and strategy.num_replicas_in_sync != cores:
        logging.getLogger("bert_tf").warning(
            "--num_tpu_cores=%d but the TPU has %d cores; using %d", cores,
            strategy.num_replicas_in_sync, strategy.num_replicas_in_sync)
    return strategy


def worker_failure(error):
    """The gist of a collective failure: which tasks stopped, else the abort reason."""
    text = str(getattr(error, "message", "") or error)
    if "unhealthy" in text or "heartbeat" in text:
        tasks = sorted(set(re.findall(r"/job:\w+/replica:\d+/task:\d+", text)))
        if tasks:
            return f"{', '.join(tasks)} stopped sending heartbeats"
    for line in text.splitlines():
        if "aborted by:" in line:
            return line.split("aborted by:", 1)[1].strip()[:300]
        if "Connection reset" in line or "Socket closed" in line:
            return line.strip()[:300]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else type(error).__name__)[:300]
