"""Quiet console output of the commands (bert_tf.commands.quiet): TF's start-up lines that a
CPU user cannot act on are dropped, real warnings/errors and our progress lines stay, and
--verbosity / TF_CPP_MIN_LOG_LEVEL bring everything back."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

from bert_tf.commands import quiet

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# The noise, as a user saw it (independent of quiet.NOISE): no line may match.
NOISE_LINE = re.compile(
    r"cuInit|oneDNN supports DT_INT64|absl::InitializeLog|Compiled cluster using XLA"
    r"|renamed to unknown|Sharding callback duration|Writing fingerprint|Assets written to"
    r"|^I\d{4} [\d:.]+ +\d+ \S+:\d+\]")  # absl prefix (date, thread, file:line) on INFO
SEEN = [  # verbatim from a CPU-only run before the fix
    b"2026-11-26 00:50:43.886471: E external/local_xla/xla/stream_executor/cuda/"
    b"cuda_platform.cc:51] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: "
    b"UNKNOWN ERROR (303)",
    b"2026-11-26 00:50:55.305340: E tensorflow/core/util/util.cc:131] oneDNN supports DT_INT64 "
    b"only on platforms with AVX-512. Falling back to the default Eigen-based implementation if "
    b"present.",
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    b"I0000 00:00:1795654250.063778    8373 device_compiler.h:196] Compiled cluster using XLA!  "
    b"This line is logged at most once for the lifetime of the process.",
]


def noisy(text):
    return [line for line in text.splitlines() if NOISE_LINE.search(line)]


def test_noise_lines_are_dropped_and_others_kept():
    cpu = quiet.noise_pattern(gpu_driver=False)
    for line in SEEN:
        assert quiet._filtered(line, cpu) == b"", line
    # a progress bar's text before the C++ line stays (without the dropped line's newline)
    bar = b"train:   0%|          | 0/20 [00:00<?, ?step/s]"
    assert quiet._filtered(bar + SEEN[2], cpu) == bar
    kept = [b"2026-11-26 00:50:55.305340: E tensorflow/core/framework/op_kernel.cc:1857] "
            b"OP_REQUIRES failed at save_restore_v2_ops.cc:189 : NOT_FOUND: x",
            b"warning: pt/model.ckpt-20 has no output_bias, output_weights: 2 variables start "
            b"from fresh weights",
            b"error: --vocab_file: v.txt: not found", b"step 10/20 loss=7.6969"]
    for line in kept:
        assert quiet._filtered(line, cpu) == line + b"\n"
    # with an NVIDIA driver a cuInit failure is worth seeing
    assert quiet._filtered(SEEN[0], quiet.noise_pattern(gpu_driver=True)) == SEEN[0] + b"\n"


def test_copy_filtered_through_a_pipe():
    r, w = os.pipe()
    out_r, out_w = os.pipe()
    os.write(w, SEEN[1] + b"\nkept 1\n" + SEEN[3] + b"\nkept 2 (no newline)")
    os.close(w)
    quiet._copy_filtered(r, out_w, quiet.noise_pattern(gpu_driver=False))
    os.close(out_w)
    assert os.read(out_r, 1 << 16) == b"kept 1\nkept 2 (no newline)"


def test_verbose_requests():
    env = {"TF_CPP_MIN_LOG_LEVEL": "2"}
    assert not quiet.verbose_requested(["bert-x", "--do_train"], env)
    assert not quiet.verbose_requested(["bert-x"], {})
    assert not quiet.verbose_requested(["bert-x"], {"TF_CPP_MIN_LOG_LEVEL": "3"})
    for argv in (["x", "--verbosity=1"], ["x", "-v", "0"], ["x", "--showprefixforinfo"]):
        assert quiet.verbose_requested(argv, env), argv
    assert quiet.verbose_requested(["x"], {"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert not quiet.verbose_requested(["x", "--", "--verbosity=1"], env)


# A command's life in miniature: XLA compile (absl pre-init warning + "Compiled cluster"), a
# SavedModel write (TF's INFO lines), our INFO/WARNING lines, a TF error as one line.
_SCRIPT = textwrap.dedent("""
    import logging, sys
    import bert_tf
    from bert_tf.commands import quiet
    quiet.setup()
    from absl import app, logging as absl_logging

    def main(argv):
        absl_logging.set_verbosity(absl_logging.INFO)
        import tensorflow as tf
        f = tf.function(lambda x: x * 2.0 + 1.0, jit_compile=True)
        print("xla", float(f(tf.constant([1.0]))[0]))
        m = tf.Module()
        m.v = tf.Variable(1.0)
        tf.saved_model.save(m, sys.argv[1])
        log = logging.getLogger("bert_tf")
        log.info("step 10/20 loss=7.6969 mlm_acc=0.0025 left=0m03s")
        log.warning("a real warning")
        try:
            tf.io.read_file(sys.argv[1] + "/missing")
        except tf.errors.NotFoundError as e:
            sys.exit(f"error: {e.message}")
    app.run(main)
""")


def _run_script(tmp_path, *flags, **extra):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / f"m{len(flags)}{len(extra)}"), *flags],
        capture_output=True, text=True, env=dict(env, PYTHONPATH=ROOT, **extra), timeout=300)


def test_quiet_by_default_and_verbose_on_request(tmp_path):
    run = lambda *flags, **extra: _run_script(tmp_path, *flags, **extra)  # noqa: E731
    proc = run()
    assert proc.returncode == 1
    assert proc.stdout == "xla 3.0\n"
    err = proc.stderr.splitlines()
    assert noisy(proc.stderr) == [], proc.stderr
    assert "step 10/20 loss=7.6969 mlm_acc=0.0025 left=0m03s" in err  # no absl prefix
    assert "warning: a real warning" in err  # one plain line, no absl prefix either
    assert err[-1].startswith("error: ") and "missing" in err[-1]
    assert len(err) == 3, err
    # --verbosity brings back TF's lines and the prefix (TF_CPP_MIN_LOG_LEVEL=0|1 too: above)
    proc = run("--verbosity=0")
    assert proc.returncode == 1
    assert any("Compiled cluster using XLA" in line for line in noisy(proc.stderr))
    assert any("Writing fingerprint" in line for line in noisy(proc.stderr))
    assert re.search(r"^I\d{4} .*\] step 10/20 loss=7.6969", proc.stderr, re.M)
    assert re.search(r"^W\d{4} .*\] a real warning$", proc.stderr, re.M)


# slow: test_quiet_by_default_and_verbose_on_request (verbose output keeps the prefix) with
# test_verbose_requests (--showprefixforinfo requests verbose output)
@pytest.mark.slow
def test_showprefixforinfo_brings_the_prefix_back(tmp_path):
    proc = _run_script(tmp_path, "--showprefixforinfo")
    assert re.search(r"^I\d{4} .*\] step 10/20 loss=7.6969", proc.stderr, re.M)
    assert re.search(r"^W\d{4} .*\] a real warning$", proc.stderr, re.M)
