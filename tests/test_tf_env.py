"""bert_tf/tf_env.py: the environment importing bert_tf gives TensorFlow (issue 43: the CPU
allocator that keeps a training step's large tensors instead of faulting them in each step)."""
import os
import subprocess
import sys

from bert_tf import tf_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ("KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL", "TF_CPU_ALLOCATOR_USE_BFC",
         "TF_CPU_BFC_MEM_LIMIT_IN_MB")


def test_apply_sets_defaults_and_keeps_what_the_user_set():
    env = {"TF_CPU_ALLOCATOR_USE_BFC": "false", "OTHER": "x"}
    added = tf_env.apply(env)
    assert added == ["KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL", "TF_CPU_BFC_MEM_LIMIT_IN_MB"]
    assert env["TF_CPU_ALLOCATOR_USE_BFC"] == "false" and env["OTHER"] == "x"
    assert env["KERAS_BACKEND"] == "tensorflow" and env["TF_CPP_MIN_LOG_LEVEL"] == "2"
    # never under TF's own 64 GiB default, the host's memory where it has more
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1 << 20)
    assert int(env["TF_CPU_BFC_MEM_LIMIT_IN_MB"]) == max(memory, 65536)
    assert tf_env.apply(env) == []


def _allocator(extra_env):
    """What a fresh process that imports bert_tf and then TF reports for the CPU allocator."""
    code = ("import bert_tf, tensorflow as tf\n"
            "x = tf.ones([256, 256]) * 2.0\n"
            "try:\n"
            "    print('stats', tf.config.experimental.get_memory_info('CPU:0')['peak'] > 0)\n"
            "except ValueError:\n"
            "    print('no stats')\n"
            "print('added', ','.join(bert_tf.tf_env.ADDED))\n")
    env = {k: v for k, v in os.environ.items() if k not in NAMES}
    env.update(extra_env, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split("\n")


def test_importing_bert_tf_gives_tf_the_bfc_cpu_allocator():
    # BFC keeps allocator statistics; TF's default CPU allocator has none (ValueError).
    lines = _allocator({})
    assert lines[0] == "stats True"
    assert lines[1] == "added " + ",".join(NAMES)
    lines = _allocator({"TF_CPU_ALLOCATOR_USE_BFC": "false"})
    assert lines[0] == "no stats"
    assert lines[1] == "added KERAS_BACKEND,TF_CPP_MIN_LOG_LEVEL,TF_CPU_BFC_MEM_LIMIT_IN_MB"
