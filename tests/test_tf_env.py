"""bert_tf/tf_env.py: the environment bert_tf gives TensorFlow (issue 43: the commands' CPU
allocator keeps a training step's large tensors instead of faulting them in each step, and
oneDNN's CPU kernels are on where TF leaves them off)."""
import os
import platform
import subprocess
import sys

from bert_tf import tf_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY = ["KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL"]
# the commands turn oneDNN on where it was measured: x86-64 (elsewhere TF's choice stays)
ONEDNN = (["TF_ENABLE_ONEDNN_OPTS"]
          if platform.machine().lower() in ("x86_64", "amd64") else [])
try:  # computed here, not by the function under test
    MEMORY = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1 << 20)
except (AttributeError, ValueError, OSError):
    MEMORY = None


def test_apply_sets_defaults_and_keeps_what_the_user_set(monkeypatch):
    monkeypatch.setattr(tf_env, "tf_started", lambda: False)  # as before TF starts
    monkeypatch.setattr(tf_env, "tf_imported", lambda: False)  # ... and is imported
    env = {"KERAS_BACKEND": "tensorflow", "OTHER": "x"}
    assert tf_env.apply(env) == ["TF_CPP_MIN_LOG_LEVEL"]  # the library: no allocator
    assert env == {"KERAS_BACKEND": "tensorflow", "OTHER": "x", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env = {"TF_CPU_ALLOCATOR_USE_BFC": "false"}
    added = tf_env.apply(env, commands=True)
    assert env["TF_CPU_ALLOCATOR_USE_BFC"] == "false"  # the user's value stays
    if MEMORY is None:
        assert added == LIBRARY + ONEDNN
    else:  # never under TF's own 64 GiB default; the host's memory where it has more
        assert added == LIBRARY + ["TF_CPU_BFC_MEM_LIMIT_IN_MB"] + ONEDNN
        assert int(env["TF_CPU_BFC_MEM_LIMIT_IN_MB"]) == max(MEMORY, 65536)
    assert env.get("TF_ENABLE_ONEDNN_OPTS") == ("1" if ONEDNN else None)
    assert tf_env.apply(env, commands=True) == []
    env = {"TF_ENABLE_ONEDNN_OPTS": "0"}
    assert "TF_ENABLE_ONEDNN_OPTS" not in tf_env.apply(env, commands=True)
    assert env["TF_ENABLE_ONEDNN_OPTS"] == "0"  # the user's value stays
    monkeypatch.setattr(tf_env, "tf_imported", lambda: True)  # too late for oneDNN
    env = {}
    assert "TF_ENABLE_ONEDNN_OPTS" not in tf_env.apply(env, commands=True)
    assert "TF_CPU_ALLOCATOR_USE_BFC" in env  # imported, not started: the allocator still
    monkeypatch.setattr(tf_env, "tf_started", lambda: True)  # too late for the allocator
    env = {}
    assert tf_env.apply(env, commands=True) == LIBRARY and list(env) == LIBRARY


def _run(code, extra_env=None):
    """stdout lines of a fresh process running `code` (environment without tf_env's names)."""
    names = set(tf_env.defaults(commands=True)) | set(tf_env.ALLOCATOR) | {tf_env.ONEDNN}
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(extra_env or {}, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split("\n")


PROBE = ("import tensorflow as tf\n"
         "x = tf.ones([256, 256]) * 2.0\n"
         "try:\n"  # BFC keeps statistics; TF's default CPU allocator has none (ValueError)
         "    print('bfc', tf.config.experimental.get_memory_info('CPU:0')['peak'] > 0)\n"
         "except ValueError:\n"
         "    print('malloc')\n"
         "import os\n"  # _run starts without these names: the ones present bert_tf set
         "print('added', ','.join(k for k in %r if k in os.environ))\n"
         # TF's own answer to 'are oneDNN's kernels on' (private: no public one)
         "from tensorflow.python.util import _pywrap_util_port\n"
         "print('onednn', _pywrap_util_port.IsMklEnabled())\n"
         % ["KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL", "TF_CPU_ALLOCATOR_USE_BFC",
            "TF_CPU_BFC_MEM_LIMIT_IN_MB", "TF_ENABLE_ONEDNN_OPTS"])


def test_the_commands_get_the_bfc_allocator_and_onednn_and_the_library_does_not():
    allocator = ["TF_CPU_ALLOCATOR_USE_BFC"] + (["TF_CPU_BFC_MEM_LIMIT_IN_MB"] if MEMORY else [])
    out = _run("import bert_tf.commands\n" + PROBE)
    assert out[:2] == ["bfc True", "added " + ",".join(LIBRARY + allocator + ONEDNN)]
    if ONEDNN:  # TF's own answer (a TF build without oneDNN would say False: none here)
        assert out[2] == "onednn True"
    # the library leaves oneDNN to TF (on Linux x86 only for VNNI/BF16/AMX CPUs)
    assert _run("import bert_tf\n" + PROBE)[:2] == ["malloc", "added " + ",".join(LIBRARY)]
    # the user's setting wins
    out = _run("import bert_tf.commands\n" + PROBE,
               {"TF_CPU_ALLOCATOR_USE_BFC": "false", "TF_ENABLE_ONEDNN_OPTS": "0"})
    assert out[0] == "malloc" and out[2] == "onednn False"
    # TF imported but no op run yet: still in time for the allocator, not for oneDNN
    out = _run("import tensorflow\nimport bert_tf.commands\n" + PROBE)
    assert out[:2] == ["bfc True", "added " + ",".join(LIBRARY + allocator)]
    # TF already running: the allocator is fixed, so nothing claims to set it
    assert _run("import tensorflow as tf\ntf.ones([1]) + 1\nimport bert_tf.commands\n" + PROBE
                )[:2] == ["malloc", "added " + ",".join(LIBRARY)]
