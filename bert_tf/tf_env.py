"""The environment bert_tf gives TensorFlow, set when bert_tf is imported (before TF starts).

Each setting is a default: a value already in the environment wins, so any of them can be
turned off from the shell (`TF_CPU_ALLOCATOR_USE_BFC=false bert-run-pretraining ...`).

  KERAS_BACKEND=tensorflow     Keras 3 must run on TF; read when keras is first imported.
  TF_CPP_MIN_LOG_LEVEL=2       keeps TF's C++ start-up chatter out of command output
                               (bert_tf.commands.quiet says how to bring it back).
  TF_CPU_ALLOCATOR_USE_BFC=true
                               TF's CPU allocator keeps freed blocks for the next step (as on
                               GPU) instead of handing each tensor to malloc. glibc maps every
                               block over 32 MiB fresh from the kernel and unmaps it when freed,
                               so each training step faults in every page of its large tensors
                               again (the masked-LM logits alone are 78 MB at batch 32):
                               an element-wise op on them ran 2.4x slower, and a bert-tiny
                               pre-training step 1.4x slower, than with this setting
                               (docs: benchmarks.md). Read when TF first allocates a tensor, so
                               import bert_tf before running TF ops.
  TF_CPU_BFC_MEM_LIMIT_IN_MB=<the larger of 64 GiB and physical memory>
                               that allocator's cap; its own default, 64 GiB, would fail jobs
                               that malloc serves on a host with more memory.
"""
import os


def _physical_memory_mb():
    """This host's physical memory in MiB, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1 << 20)
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        return None


def defaults():
    """{name: value} of the settings above for this host."""
    values = {"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2",
              "TF_CPU_ALLOCATOR_USE_BFC": "true"}
    memory = _physical_memory_mb()
    if memory:
        values["TF_CPU_BFC_MEM_LIMIT_IN_MB"] = str(max(memory, 1 << 16))
    return values


def apply(environ=None):
    """Sets the defaults above in `environ` (default os.environ), leaving values already set.

    Args:
        environ: the mapping to fill (tests pass a dict).

    Returns:
        the names it set (not those that were already there).
    """
    environ = os.environ if environ is None else environ
    values = defaults()
    added = [name for name in values if name not in environ]
    for name in added:
        environ[name] = values[name]
    return added


# What importing bert_tf added to this process's environment (bench/ starts its peers without it).
ADDED = []
