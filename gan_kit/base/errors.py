"""Exceptions the CLI turns into one-line messages and exit code 2 (no traceback unless --debug)."""

from __future__ import annotations


class GankitError(Exception):
    """A user-facing error: its message is printed as is, one problem per line."""

    exit_code = 2


class RecipeError(GankitError):
    """Every problem found in a recipe, reported at once.

    ``problems`` holds one ``"<file>: <dotted.key>: <what is wrong> (<fix>)"`` line each.
    """

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class PluginError(GankitError):
    """A plugin could not be loaded, or two plugins registered the same component."""


class CheckpointError(GankitError):
    """A checkpoint file is missing, truncated, foreign, or of a newer format."""


class TrainingError(GankitError):
    """Training cannot go on (for example a non-finite loss with ``on_nonfinite = "stop"``)."""


class Interrupted(GankitError):
    """SIGINT or SIGTERM stopped training after a checkpoint was written; ``exit_code`` is the
    shell's convention for the signal (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, message: str, exit_code: int = 130):
        super().__init__(message)
        self.exit_code = exit_code


#: Texts no message may show (a database password read from a URL or the environment).
_SECRETS: set[str] = set()


def keep_secret(*texts: str) -> None:
    """Never print ``texts``: ``redact`` (which every one-line error goes through) masks them."""
    _SECRETS.update(t for t in texts if t and len(t) >= 3)


def redact(text: str) -> str:
    """``text`` with every secret given to ``keep_secret`` as ``***``."""
    for s in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(s, "***")
    return text


def clip(text: str, limit: int = 240) -> str:
    """The first non-empty line of ``text`` (a library's message quoted in a one-line error),
    its runs of spaces collapsed, cut at a word boundary before ``limit`` characters with " ..."
    when longer - never in the middle of a word, a path or a number. ``""`` for an empty text."""
    lines = [" ".join(line.split()) for line in str(text).splitlines()]
    first = next((line for line in lines if line), "")
    if len(first) <= limit:
        return first
    cut = first.rfind(" ", 0, limit + 1)
    return (first[:cut] if cut > limit // 2 else first[:limit]).rstrip(" ,;:(") + " ..."
