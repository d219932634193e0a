"""Quiet console output for the commands (`setup()`, called before TensorFlow is imported).

By default a command shows what a user can act on: its own lines, warnings and errors. Dropped:
- TensorFlow's Python INFO lines (SavedModel writing: multi-kilobyte `input name(s) ... renamed
  to unknown` lines, "Assets written to", fingerprints, saver timings);
- the absl prefix (date, thread id, file:line) of INFO lines, e.g. training progress, and of
  warnings, which read `warning: <what it means and what to do>` instead;
- C++ lines written to stderr before Python can filter them (`NOISE`): the CUDA `cuInit`
  failure on a machine with no NVIDIA driver, oneDNN's DT_INT64 note, absl's pre-init warning
  and XLA's "Compiled cluster" line. A forked child process copies stderr through and drops only
  these lines (a child, not a thread: it still flushes everything if the command crashes).
`TF_CPP_MIN_LOG_LEVEL` stays 2 (bert_tf's default), so other C++ errors and warnings pass, and
no GPU is hidden. `--verbosity=N` (or `-v N`), `--showprefixforinfo`, or TF_CPP_MIN_LOG_LEVEL
set to 0 or 1 by the user turns all of this off (with --verbosity TF's C++ INFO lines too).
"""
import atexit
import logging
import os
import re
import select
import signal
import sys
import time

# Whole C++ lines (what follows a progress bar's text on the same line is matched too).
_CUINIT = rb"\S+ \S+: E \S*cuda_platform\.cc:\d+\] failed call to cuInit: .*"
NOISE = [
    rb"\S+ \S+: E \S*util\.cc:\d+\] oneDNN supports DT_INT64 only on platforms with AVX-512\..*",
    rb"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    rb"I\d{4} [\d:.]+ +\d+ device_compiler\.h:\d+\] Compiled cluster using XLA!.*",
]
_VERBOSE_FLAGS = ("--verbosity", "--v", "-v", "--showprefixforinfo", "--noshowprefixforinfo")
_started = False


def verbose_requested(argv=None, environ=None):
    """True when the user asked for TF's full logs: a verbosity flag or TF_CPP_MIN_LOG_LEVEL 0/1.

    Args:
        argv: command line (default sys.argv).
        environ: environment (default os.environ).
    """
    argv = sys.argv if argv is None else argv
    environ = os.environ if environ is None else environ
    args = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    asked = any(a.split("=")[0] in _VERBOSE_FLAGS for a in args)
    return asked or environ.get("TF_CPP_MIN_LOG_LEVEL", "2") in ("0", "1")


def has_nvidia_driver():
    """Whether this machine has an NVIDIA driver (there a cuInit failure is worth showing)."""
    return os.path.exists("/proc/driver/nvidia/gpus") or os.path.exists("/dev/nvidia0")


def noise_pattern(gpu_driver=None):
    """The compiled regex of the dropped C++ lines (cuInit's only without an NVIDIA driver)."""
    gpu_driver = has_nvidia_driver() if gpu_driver is None else gpu_driver
    parts = NOISE if gpu_driver else NOISE + [_CUINIT]
    return re.compile(rb"(?:" + rb"|".join(parts) + rb")\r?$")


def setup(argv=None):
    """Makes this command's console output quiet (see the module docstring); once per process.

    Call it before TensorFlow is imported. Does nothing for a verbose request, except that
    --verbosity lets TF's C++ INFO lines through (TF_CPP_MIN_LOG_LEVEL=0 unless the user set it).
    """
    global _started
    if _started:
        return
    _started = True
    argv = sys.argv if argv is None else argv
    if verbose_requested(argv):
        if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2") == "2" and any(
                a.split("=")[0] in _VERBOSE_FLAGS[:3] for a in argv[1:]):
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
        return
    from absl import flags
    from absl import logging as absl_logging  # noqa: F401  (defines --showprefixforinfo)
    flags.FLAGS.set_default("showprefixforinfo", False)
    absl_logging.get_absl_handler().setFormatter(plain_formatter())
    # TF logs through both loggers; absl's level follows --verbosity, so a filter, not a level.
    for name in ("absl", "tensorflow"):
        logging.getLogger(name).addFilter(_drop_tensorflow_info)
    filter_stderr(noise_pattern())


def plain_formatter():
    """absl's log formatter, except that a WARNING reads `warning: <message>` (no date, thread
    id, file:line), as the commands' own `error: ...` lines do."""
    from absl import logging as absl_logging

    class PlainWarnings(absl_logging.PythonFormatter):
        def format(self, record):
            if record.levelno == logging.WARNING:
                return "warning: " + logging.Formatter.format(self, record)
            return super().format(record)

    return PlainWarnings()


def _drop_tensorflow_info(record):
    """logging filter: False for INFO (and lower) records from TensorFlow's own modules."""
    return record.levelno >= 30 or f"{os.sep}tensorflow{os.sep}" not in record.pathname


def filter_stderr(pattern):
    """Routes file descriptor 2 through a forked child that drops lines matching `pattern`.

    Args:
        pattern: compiled bytes regex, matched against the end of each line.
    """
    try:
        sys.stderr.flush()
        read_fd, write_fd = os.pipe()
        out_fd = os.dup(2)
        pid = os.fork()
    except (OSError, AttributeError):  # no fork (Windows) or no fd 2: leave stderr as it is
        return
    if pid == 0:  # the child: copy until every writer has closed the pipe
        try:
            os.close(write_fd)
            # Ctrl-C / SIGTERM are the command's to handle (it may still print after them).
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            _copy_filtered(read_fd, out_fd, pattern)
        finally:
            os._exit(0)
    os.close(read_fd)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    atexit.register(_finish, pid, out_fd)


def _finish(pid, out_fd):
    """At exit: close our end of the pipe and give the child a moment to show the last lines
    (before the shell's prompt); it keeps running while a subprocess still writes."""
    try:
        sys.stderr.flush()
        os.dup2(out_fd, 2)  # anything written during interpreter shutdown goes straight out
        deadline = time.monotonic() + 2
        while os.waitpid(pid, os.WNOHANG)[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    except (OSError, ValueError):
        pass


def _copy_filtered(read_fd, out_fd, pattern):
    pending = b""
    while True:
        # A partial line (a progress bar's \r update) is shown after 0.1 s without a newline.
        ready, _, _ = select.select([read_fd], [], [], 0.1 if pending else None)
        if not ready:
            _write(out_fd, pending)
            pending = b""
            continue
        data = os.read(read_fd, 1 << 16)
        if not data:
            break
        *lines, pending = (pending + data).split(b"\n")
        _write(out_fd, b"".join(_filtered(line, pattern) for line in lines))
    _write(out_fd, pending)


def _filtered(line, pattern):
    m = pattern.search(line)
    if m is None:
        return line + b"\n"
    return line[:m.start()]  # a progress bar's text before the dropped line stays


def _write(fd, data):
    while data:
        data = data[os.write(fd, data):]
