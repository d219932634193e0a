"""Progress bars: every tqdm bar of bert_tf comes from `bar()`, so all behave the same.

On a terminal a bar redraws in place. In a file (stderr redirected, a CI or scheduler log)
each redraw would stay in the file as another copy of the bar ('\\r' is no line break there),
so the bar is written once, when it closes, with its totals and overall rate. Jupyter gets
tqdm's widget.
"""
import sys

_ONCE = []  # the print-once tqdm subclass, made on first use (tqdm's import costs ~0.1 s)


def is_terminal(stream=None):
    """Whether `stream` (default sys.stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def _in_notebook():
    from tqdm import auto, autonotebook, std  # auto first: it silences autonotebook's warning
    del auto
    return autonotebook.tqdm is not std.tqdm


def _once_class():
    if not _ONCE:
        from tqdm import std

        class OnceBar(std.tqdm):
            """tqdm that draws only its final state (on close), on a line of its own."""

            def display(self, msg=None, pos=None):
                if not self.disable:  # close() disables the bar before its last display
                    return True
                self.fp.write(str(self) if msg is None else msg)
                return True

        _ONCE.append(OnceBar)
    return _ONCE[0]


def bar(iterable=None, **kwargs):
    """A tqdm progress bar (tqdm's arguments) that is written once when not on a terminal.

    Args:
        iterable: what to iterate over, if anything.
        **kwargs: tqdm arguments (desc, total, unit, disable, file, ...).
    """
    if is_terminal(kwargs.get("file") or sys.stderr) or _in_notebook():
        from tqdm.auto import tqdm
        return tqdm(iterable, **kwargs)
    return _once_class()(iterable, **kwargs)
