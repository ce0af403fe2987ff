"""SIGTERM as an exception, for the moments a job must clean up instead of dying outright.

`python -m srb resume` and a scheduler stop a job with SIGTERM. By default Python dies at once,
which is right for most jobs (their outputs are written atomically), but not while a service is
half started (it would be orphaned) or while model answers are in flight (answers the server
already computed would be lost and asked again). `sigterm_raises` turns SIGTERM into SystemExit
for such a block; `shielded` ignores SIGINT/SIGTERM while the cleanup itself runs.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """While the block runs, SIGTERM raises SystemExit(143) in the main thread, so `finally`
    clauses and context managers run. Only in the main thread (the only one Python delivers
    signals to) and only over the default handler; the previous handler is restored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield
        return

    def raise_exit(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, raise_exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def shielded() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM while the block runs (a cleanup a second signal must not cut)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in saved:
        signal.signal(s, signal.SIG_IGN)
    try:
        yield
    finally:
        for s, handler in saved.items():
            if handler is not None:
                signal.signal(s, handler)
