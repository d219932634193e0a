"""`--mixed_precision=auto`: bfloat16 where the hardware computes it fast, else float32.

bfloat16 pays where the chip has bf16 matrix units:
  TPU   every TPU (its matrix units are bf16)
  GPU   compute capability >= 8.0 (Ampere and later: bf16 tensor cores)
  CPU   x86 with `avx512_bf16` or AMX (`amx_bf16`) in /proc/cpuinfo's flags, with oneDNN on
Elsewhere TensorFlow emulates bf16 and it runs slower than float32, so auto keeps float32.
`choose()` is the pure rule (tested with faked facts); `resolve()` gathers the facts of this
process (the strategy's devices, GPU details, cpuinfo) and applies it.
"""
import os
import re

from bert_tf import tf_env

MIN_GPU_CAPABILITY = (8, 0)
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
CPUINFO = "/proc/cpuinfo"


def cpu_flags(path=None):
    """The set of CPU feature flags of /proc/cpuinfo's first `flags` line (empty elsewhere).

    Args:
        path: the cpuinfo file; None: `CPUINFO`, read when called (tests set a fake one).
    """
    path = CPUINFO if path is None else path
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return set(value.split())
    except OSError:
        pass
    return set()


def choose(kind, gpu_capabilities=(), flags=(), onednn=True):
    """(precision, reason): "bfloat16" or "none" for a device kind and its facts.

    Args:
        kind: "tpu", "gpu" or "cpu" (what the strategy computes on).
        gpu_capabilities: (major, minor) of each GPU used; bf16 only if all are >= 8.0.
        flags: the CPU's feature flags (`cpu_flags()`).
        onednn: whether TensorFlow's oneDNN CPU kernels are on (TF_ENABLE_ONEDNN_OPTS != 0):
            without them CPU bf16 is emulated.
    """
    if kind == "tpu":
        return "bfloat16", "TPU (bf16 matrix units)"
    if kind == "gpu":
        caps = [tuple(c) for c in gpu_capabilities]
        shown = ", ".join(f"{a}.{b}" for a, b in caps) or "unknown"
        if caps and min(caps) >= MIN_GPU_CAPABILITY:
            return "bfloat16", f"GPU compute capability {shown} >= 8.0 (bf16 tensor cores)"
        return "none", f"GPU compute capability {shown} < 8.0 (no bf16 tensor cores)"
    have = [f for f in CPU_BF16_FLAGS if f in set(flags)]
    if not have:
        return "none", "CPU without avx512_bf16 or AMX (bf16 would be emulated, slower)"
    if not onednn:
        return "none", f"CPU has {have[0]} but TF_ENABLE_ONEDNN_OPTS=0 (bf16 would be emulated)"
    return "bfloat16", f"CPU has {have[0]}"


def _onednn_on():
    return os.environ.get(tf_env.ONEDNN, "1").strip().lower() not in ("0", "false")


def device_kind(strategy=None):
    """"tpu", "gpu" or "cpu": what `strategy` computes on (without one: the visible devices).

    Args:
        strategy: a tf.distribute.Strategy, or None.
    """
    import tensorflow as tf
    if strategy is not None:
        devices = " ".join(getattr(strategy.extended, "worker_devices", ())).upper()
        for kind in ("TPU", "GPU"):
            if f"{kind}:" in devices:
                return kind.lower()
        return "cpu"
    for kind in ("TPU", "GPU"):
        if tf.config.list_physical_devices(kind):
            return kind.lower()
    return "cpu"


def gpu_capabilities(strategy=None):
    """(major, minor) compute capability of each GPU the strategy computes on (without one:
    each visible GPU), of those TF reports one for.

    Args:
        strategy: a tf.distribute.Strategy, or None.
    """
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    if strategy is not None:
        devices = " ".join(getattr(strategy.extended, "worker_devices", ())).upper()
        used = {int(n) for n in re.findall(r"GPU:(\d+)", devices)}
        gpus = [g for g in gpus if int(g.name.rsplit(":", 1)[-1]) in used]
    caps = []
    for gpu in gpus:
        cap = tf.config.experimental.get_device_details(gpu).get("compute_capability")
        if cap:
            caps.append(tuple(cap))
    return caps


def resolve(precision, strategy=None):
    """(precision, reason) with "auto" replaced by this process's choice; other values are
    returned as given with reason None.

    Args:
        precision: a --mixed_precision value.
        strategy: the run's tf.distribute.Strategy (its devices decide), or None.
    """
    if (precision or "none").lower() != "auto":
        return precision, None
    kind = device_kind(strategy)
    return choose(kind, gpu_capabilities(strategy) if kind == "gpu" else (),
                  cpu_flags() if kind == "cpu" else (), _onednn_on())
