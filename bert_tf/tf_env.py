"""The environment bert_tf gives TensorFlow, set before TF starts.

Each setting is a default: a value already in the environment wins, so any of them can be
changed from the shell (`TF_CPU_ALLOCATOR_USE_BFC=false bert-run-pretraining ...`).

Importing bert_tf sets:
  KERAS_BACKEND=tensorflow     Keras 3 must run on TF; read when keras is first imported.
  TF_CPP_MIN_LOG_LEVEL=2       keeps TF's C++ start-up chatter out of command output
                               (bert_tf.commands.quiet says how to bring it back).
The commands (bert_tf.commands: bert-run-pretraining, bert-run-classifier, ...) also set:
  TF_CPU_ALLOCATOR_USE_BFC=true
                               TF's CPU allocator keeps freed blocks for the next step (as on
                               GPU) instead of handing each tensor to malloc. glibc maps every
                               block over 32 MiB fresh from the kernel and unmaps it when freed,
                               so each training step faults in every page of its large tensors
                               again (the masked-LM logits are 78 MB at batch 32). Measured by
                               bench/cpu_allocator.py (docs: benchmarks.md). The cost: the
                               process keeps its peak memory (and BFC's rounding, up to ~1.5x
                               it with sizes that keep growing) instead of returning it, which
                               suits a training job and not every program that imports bert_tf,
                               so the library alone does not set it.
  TF_CPU_BFC_MEM_LIMIT_IN_MB=<the larger of 64 GiB and physical memory>
                               that allocator's cap; its own default, 64 GiB, would stop jobs
                               that malloc serves on a host with more memory.
  TF_ENABLE_ONEDNN_OPTS=1      (x86-64 only) TF's oneDNN CPU kernels (matmuls and their fused
                               forms), which TF turns on by itself on Linux x86 only for CPUs
                               with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX. On an AVX2 host
                               (AMD EPYC, 2 cores) the pre-training step ran 1.06x (bert-tiny)
                               and 1.08x (bert-base, CPU time per step) faster, bert-mini no
                               measurable change (docs: install.md). Results move in the last
                               bits (oneDNN adds in another order), as between hosts. ARM CPUs
                               keep TF's choice: not measured there.
TF reads the allocator settings when its runtime starts (the first op) and the oneDNN one when
it is imported, so each is left unset once that has happened in this process (it would not
apply, and children would inherit a setting their parent never used). Child processes inherit
them (the demo's steps, a command's workers), as any environment variable.
"""
import os
import platform
import sys

ALLOCATOR = ("TF_CPU_ALLOCATOR_USE_BFC", "TF_CPU_BFC_MEM_LIMIT_IN_MB")
ONEDNN = "TF_ENABLE_ONEDNN_OPTS"


def _physical_memory_mb():
    """This host's physical memory in MiB, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1 << 20)
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        return None


def tf_imported():
    """Whether TensorFlow is imported in this process (it has read TF_ENABLE_ONEDNN_OPTS)."""
    return "tensorflow" in sys.modules


def tf_started():
    """Whether TensorFlow's eager runtime has started in this process (it has run an op).
    Never imports TensorFlow nor creates its context. A TF1 `Session` made before any eager op
    is not seen (its devices, and so the allocator, exist by then)."""
    if "tensorflow" not in sys.modules:
        return False
    try:
        from tensorflow.python.eager import context
        ctx = context.context_safe()
        return ctx is not None and bool(ctx._initialized)
    except Exception:  # a partial import or a changed private API: assume it started
        return True


def defaults(commands=False):
    """{name: value} of the settings above for this host.

    Args:
        commands: also the commands' settings (the CPU allocator, oneDNN).
    """
    values = {"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    if commands:
        values["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
        memory = _physical_memory_mb()
        if memory:
            values["TF_CPU_BFC_MEM_LIMIT_IN_MB"] = str(max(memory, 1 << 16))
        if platform.machine().lower() in ("x86_64", "amd64"):
            values[ONEDNN] = "1"
    return values


def apply(environ=None, commands=False):
    """Sets the defaults above in `environ` (default os.environ), leaving values already set,
    the allocator's only while TF has not started and oneDNN's only while TF is not imported.
    bert_tf's import applies the library's; bert_tf.commands (and bench/) apply the commands'.

    Args:
        environ: the mapping to fill (tests pass a dict).
        commands: also the commands' settings (the CPU allocator, oneDNN).

    Returns:
        the names it set (not those that were already there).
    """
    environ = os.environ if environ is None else environ
    values = defaults(commands)
    if commands and tf_started():
        values = {k: v for k, v in values.items() if k not in ALLOCATOR}
    if commands and tf_imported():
        values.pop(ONEDNN, None)
    added = [name for name in values if name not in environ]
    for name in added:
        environ[name] = values[name]
    return added


def bfc_in_use():
    """Whether this process's TF CPU allocator is BFC: only it keeps statistics (unless a
    profiler turns them on). Imports TensorFlow and starts it."""
    import tensorflow as tf
    try:
        return tf.config.experimental.get_memory_info("CPU:0")["peak"] > 0
    except ValueError:
        return False
