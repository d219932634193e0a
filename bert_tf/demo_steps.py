"""How bert-demo runs its steps: each command echoed as a user would type it, its output
streamed (TF start-up noise kept in the log only), and each step's wall and CPU seconds.

The steps themselves, and what they show, are in bert_tf.demo.
"""
import os
import shlex
import signal
import subprocess
import sys
import time

from bert_tf import BertError, commands, fileio


def say(text):
    """Announces a step (a blank line, then `==> text`)."""
    print(f"\n==> {text}", flush=True)


def cpu_seconds():
    """CPU seconds of this process and its finished steps (user + system): on a shared machine
    wall time grows with the others' load, this far less."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class StepClock:
    """Each step's wall and CPU seconds, printed as it ends and listed in the summary."""

    def __init__(self):
        self.rows, self._current = [], None

    def start(self, text):
        """Ends the running step and starts the one `text` announces (`say`s it)."""
        self.stop()
        say(text)
        self._current = (text.split(" ", 1)[0], time.time(), cpu_seconds())

    def stop(self):
        """Ends the running step, printing `(step N/6: W s, CPU C s)`."""
        if self._current:
            step, wall, cpu = self._current
            self.rows.append((step, time.time() - wall, cpu_seconds() - cpu))
            print(f"(step {step}: {self.rows[-1][1]:.1f} s, CPU {self.rows[-1][2]:.1f} s)",
                  flush=True)
            self._current = None


def _noise():
    """TF start-up lines a user cannot act on (the commands drop them themselves; the
    vocab builder and demo_predict.py do not): kept in the step's log, not echoed."""
    from bert_tf.commands import quiet
    pattern = quiet.noise_pattern()
    return lambda line: pattern.search(line.rstrip("\n").encode()) is not None


def shown(arg):
    """One argument as printed: paths under the current directory relative to it."""
    if arg == sys.executable:
        return "python"
    cwd = os.getcwd()
    flag, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
    if os.path.isabs(value) and value.startswith(cwd + os.sep):
        value = os.path.relpath(value, cwd)
    return shlex.quote(flag + eq + value)


def shown_argv(argv):
    """The command as a user types it: `bert-<name> ...` for our commands."""
    if argv[:2] == [sys.executable, "-m"] and commands.command_name(argv[2]):
        argv = [commands.command_name(argv[2])] + argv[3:]
    return [shown(a) for a in argv]


def step_dies_with_demo():
    """preexec_fn of each step: SIGTERM when the demo dies, SIGKILL included (a killed demo
    leaves no step running; run_pretraining takes SIGTERM as a clean stop)."""
    from bert_tf.pretraining_data import guard
    guard.set_parent_death_signal(signal.SIGTERM)


def run(argv, log_path=None):
    """Runs one step's command, echoing it; its output streams to the console (and a log).

    Args:
        argv: the command line.
        log_path: where its whole output is written too, or None.
    Returns:
        its output (stdout and stderr).
    Raises:
        BertError: it exited with a non-zero status.
    """
    words = shown_argv(argv)
    print("$ " + " ".join(words), flush=True)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, preexec_fn=step_dies_with_demo)
    lines, noise = [], _noise()
    for line in proc.stdout:
        if not noise(line):
            sys.stdout.write(line)
        lines.append(line)
    output = "".join(lines)
    if log_path:
        fileio.write_text_atomic(log_path, output)
    if proc.wait() != 0:
        step = words[0] if words[0] != "python" else next(
            (a for a in words[1:] if not a.startswith("-")), words[-1])
        raise BertError(f"{step}: step failed (exit {proc.returncode}); its output is above")
    return output


def command(module):
    """argv of command `bert_tf.commands.<module>` run by this interpreter."""
    return [sys.executable, "-m", f"bert_tf.commands.{module}"]
