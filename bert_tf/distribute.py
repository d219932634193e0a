"""tf.distribute strategies and mixed-precision policies for training.

`get_strategy(name)` returns a strategy for one of
  "one_device"   the first GPU, else the CPU
  "mirrored"     all local GPUs; without GPUs the logical CPU devices when there are several
                 (tests split the CPU in two), else the CPU
  "multi_worker" MultiWorkerMirroredStrategy (cluster from TF_CONFIG)
  "tpu"          TPUClusterResolver(tpu, zone, project) -> connect -> initialize -> TPUStrategy
  "auto"         tpu is never guessed; "mirrored" when there are several GPUs, else "one_device"
The training loop is written once against `tf.distribute.Strategy`, so every name runs the same
code path.
"""
import glob
import os

import keras
import tensorflow as tf

from bert_tf import BertError

STRATEGIES = ("one_device", "mirrored", "multi_worker", "tpu", "auto")
PRECISIONS = {"none": "float32", "float32": "float32",
              "float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}


def _local_tpu_present():
    # A Cloud TPU VM exposes its chips as device files; a TPU node is reached by name instead.
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def _tpu_strategy(tpu_name=None, tpu_zone=None, gcp_project=None):
    tpu = tpu_name or os.environ.get("TPU_NAME")
    if not tpu and not _local_tpu_present():
        raise BertError("--use_tpu: no TPU found (no --tpu_name, no TPU_NAME and no local TPU "
                        "devices)")
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu or "local", zone=tpu_zone, project=gcp_project)
        if tpu and tpu != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BertError(f"--tpu_name={tpu}: cannot use the TPU ({msg})") from None


def _mirrored_devices():
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        return [d.name for d in gpus]
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def get_strategy(name="one_device", tpu_name=None, tpu_zone=None, gcp_project=None):
    """A tf.distribute.Strategy by name (see the module docstring). Unknown name -> BertError."""
    name = (name or "auto").lower()
    if name not in STRATEGIES:
        raise BertError(f"--strategy: unknown strategy {name!r}; expected one of "
                        f"{', '.join(STRATEGIES)}")
    if name == "auto":
        name = "mirrored" if len(tf.config.list_logical_devices("GPU")) > 1 else "one_device"
    if name == "tpu":
        return _tpu_strategy(tpu_name, tpu_zone, gcp_project)
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices=_mirrored_devices())
    gpus = tf.config.list_logical_devices("GPU")
    return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")


def set_mixed_precision(precision="none"):
    """Set the global Keras dtype policy ("none"|"float16"|"bfloat16"); returns the policy name.

    Call it before building the model. float16 training also needs loss scaling, which the
    training loop adds (keras LossScaleOptimizer) when this policy is active.
    """
    key = (precision or "none").lower()
    if key not in PRECISIONS:
        raise BertError(f"--mixed_precision: unknown value {precision!r}; expected one of "
                        "none, float16, bfloat16")
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
