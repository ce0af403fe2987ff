"""`hindsight-api` with its retain writing a document's chunks in chunk order (run by the
system's own venv: imports only the standard library and hindsight_api).

Why: retain extracts a document's chunks concurrently and hands each chunk's facts to its
writer as the extraction *completes*, so the facts' row order, their links and the ids they get
follow the model's answer timing. On a warm call cache every answer is instant and the order is
the event loop's, so a store rebuilt from the same answers recalled different facts (15 of 20
questions, bench/store_repeatability.py). Here each extraction (`_extract_and_embed`, one per
chunk, called in chunk order as its tasks start) returns only after the one called before it
has: the extractions still run concurrently, only their handover is ordered.

    python hindsight_ordered.py [hindsight-api arguments]
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any


def in_call_order(
    call: Callable[..., Awaitable[Any]],
) -> Callable[..., Awaitable[Any]]:
    """`call`, whose results are returned in the order the calls were made. A call that fails or
    is cancelled raises at once, without waiting its turn (nothing is handed over); the calls
    after it still wait for those before it."""
    previous: list[asyncio.Event | None] = [None]
    relays: set[asyncio.Task[None]] = set()

    async def relay(before: asyncio.Event, mine: asyncio.Event) -> None:
        await before.wait()
        mine.set()

    def pass_turn(before: asyncio.Event | None, mine: asyncio.Event) -> None:
        """`mine` is set once the calls before it are done, without this task waiting."""
        if before is None or before.is_set():
            mine.set()
            return
        task = asyncio.get_running_loop().create_task(relay(before, mine))
        relays.add(task)
        task.add_done_callback(relays.discard)

    async def ordered(*args: Any, **kwargs: Any) -> Any:
        before, mine = previous[0], asyncio.Event()
        previous[0] = mine
        try:
            result = await call(*args, **kwargs)
            if before is not None:
                await before.wait()
        except BaseException:  # failed or cancelled: raise now, keep the order after it
            pass_turn(before, mine)
            raise
        mine.set()
        return result

    return ordered


def install() -> None:
    """Order the handover of retain's chunk extractions (see the module docstring)."""
    import inspect

    from hindsight_api.engine.retain import orchestrator

    extract = getattr(orchestrator, "_extract_and_embed", None)
    if not inspect.iscoroutinefunction(extract):  # another hindsight-api than envs/ pins
        raise SystemExit(
            "hindsight_ordered: hindsight_api.engine.retain.orchestrator has no coroutine "
            "_extract_and_embed to order; the store would depend on answer timing"
        )
    orchestrator._extract_and_embed = in_call_order(extract)


if __name__ == "__main__":
    # run as a script from srb/systems, whose modules (cognee.py, mem0.py, ...) would shadow
    # the libraries of the same names
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    install()
    from hindsight_api.main import main

    sys.argv[0] = "hindsight-api"
    sys.exit(main())
