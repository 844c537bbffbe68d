"""Stopping on a signal: SIGINT (Ctrl-C) and SIGTERM ask the loop to finish the current iteration
(``interrupts``); the engine then writes ``checkpoints/latest.pt`` and raises ``Interrupted``
(``stop_on_interrupt``); a second Ctrl-C stops at once."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

from gan_kit.base.errors import Interrupted
from gan_kit.runs.run import Run
from gan_kit.runs.rundir import resume_command

__all__ = ["InterruptRequest", "interrupts", "stop_on_interrupt"]


class InterruptRequest:
    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""


@contextlib.contextmanager
def interrupts() -> Iterator[InterruptRequest]:
    """SIGINT and SIGTERM ask the loop to stop after the current iteration (``requested``); a
    second SIGINT raises ``KeyboardInterrupt`` at once. Handlers are installed only in the main
    thread (Python's rule) and restored after."""
    state = InterruptRequest()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum, frame):
        if state.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        state.requested = True
        state.signal_name = signal.Signals(signum).name

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield state
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def stop_on_interrupt(run: Run, signal_name: str) -> None:
    """Write ``latest.pt`` at this iteration boundary and raise ``Interrupted``."""
    run.check_in_sync()
    run.refresh_G_ema()
    path = run.save_checkpoint()
    if run.world_size > 1:
        from gan_kit.training.distributed import broadcast_object

        path = broadcast_object(path)
    code = 143 if signal_name == "SIGTERM" else 130
    raise Interrupted(
        f"interrupted by {signal_name or 'a signal'} at kimg {run.cur_nimg / 1000:.3f} (step {run.step}); "
        f"checkpoint written to {path}; continue with `{resume_command(run.out_dir)}`", exit_code=code)
