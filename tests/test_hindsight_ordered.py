"""A rebuilt Hindsight store is a function of its model answers (srb/systems/hindsight.py
`settle`, srb/systems/hindsight_ordered.py): chunk extractions handed over in call order,
papers retained again one by one into compacted tables, row ids in insertion order."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import uuid

import pytest

from srb.data.schema import Paper
from srb.systems.hindsight import BANK, ORDERED_IDS_SQL, ORDERED_LAUNCHER, HindsightSystem
from srb.systems.hindsight_ordered import in_call_order
from srb.systems.store import Endpoint
from tests.hindsight_env import hindsight_venv

ENDPOINT = Endpoint("http://127.0.0.1:4321/v1", "qwen2.5-coder-0.5b", "minilm", 384)


def test_results_come_back_in_call_order_whatever_order_the_calls_finish() -> None:
    returned: list[int] = []

    async def extract(n: int, delay: float) -> int:
        await asyncio.sleep(delay)
        return n

    ordered = in_call_order(extract)

    async def one(n: int, delay: float) -> None:
        returned.append(await ordered(n, delay))

    async def main() -> None:  # the last call finishes first, the first call last
        await asyncio.gather(*(one(n, 0.05 * (4 - n)) for n in range(5)))

    asyncio.run(main())
    assert returned == [0, 1, 2, 3, 4]


def test_a_failed_call_does_not_hold_back_the_calls_after_it() -> None:
    returned: list[object] = []

    async def extract(n: int) -> int:
        await asyncio.sleep(0.05 if n == 0 else 0.0)
        if n == 1:
            raise ValueError("no answer")
        return n

    ordered = in_call_order(extract)

    async def one(n: int) -> None:
        try:
            returned.append(await ordered(n))
        except ValueError as err:
            returned.append(str(err))

    async def main() -> None:
        await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(3))), timeout=5)

    asyncio.run(main())
    assert returned == ["no answer", 0, 2]  # the failure went at once; 2 still waited for 0


def test_the_pinned_hindsight_has_what_the_launcher_orders() -> None:
    """In the venv the workflow builds: the patched function exists and is replaced."""
    code = (
        "import runpy, sys; sys.argv = ['x']; "
        f"ns = runpy.run_path({str(ORDERED_LAUNCHER)!r}, run_name='not_main'); ns['install'](); "
        "from hindsight_api.engine.retain import orchestrator as o; "
        "print(o._extract_and_embed.__qualname__)"
    )
    out = subprocess.run(
        [str(hindsight_venv() / "bin/python"), "-c", code],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "in_call_order.<locals>.ordered"


class StandInServer:
    """Records what `settle` asks of Hindsight's API and PostgreSQL, in order."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.pg = self

    def bank_path(self, suffix: str = "") -> str:
        return f"/v1/default/banks/{BANK}{suffix}"

    def call(self, method: str, path: str, what: str, **kwargs: object) -> dict:
        body = kwargs.get("json") or {}
        items = body.get("items") if isinstance(body, dict) else None
        self.done.append(f"{method} {path}" + (f" {items[0]['document_id']}" if items else ""))
        return {}

    def query(self, sql: str) -> list[str]:
        self.done.append("SQL " + ("ORDERED_IDS" if sql == ORDERED_IDS_SQL else sql))
        return []


def test_settle_retains_the_papers_again_one_by_one_into_compacted_tables(tmp_path) -> None:
    system = HindsightSystem()
    server = StandInServer()
    system._servers[tmp_path] = server  # type: ignore[assignment]
    papers = [Paper(id=f"P{n}", title=f"t{n}", text="x", source="s", licence="CC0")
              for n in (2, 1)]  # fmt: skip
    system.settle(tmp_path, ENDPOINT, papers)
    bank = f"/v1/default/banks/{BANK}"
    assert server.done == [
        f"DELETE {bank}",
        "SQL ALTER SYSTEM SET autovacuum = off",
        "SQL SELECT pg_reload_conf()",
        "SQL VACUUM FULL",
        "SQL ORDERED_IDS",
        f"PUT {bank}",
        f"POST {bank}/memories P2",  # in the order given, not sorted or completed
        f"POST {bank}/memories P1",
    ]


@pytest.mark.integration
def test_new_rows_get_ids_in_insertion_order_on_a_real_postgresql() -> None:
    from srb.pg import bin_dir, private_postgres

    with private_postgres(bin_dir(hindsight_venv())) as pg:
        pg.query(
            "create table facts(id uuid primary key default gen_random_uuid(), t text);"
            "create table links(id uuid default gen_random_uuid(), n int)"
        )
        pg.query(ORDERED_IDS_SQL)
        pg.query("insert into facts(t) values ('a'), ('b'); insert into links(n) values (1)")
        pg.query("insert into facts(t) values ('c')")
        facts = pg.query("select id from facts order by t")
        links = pg.query("select id from links")

    def md5_uuid(text: str) -> str:
        return str(uuid.UUID(hashlib.md5(text.encode()).hexdigest()))

    # each table counts on its own sequence
    assert facts == [md5_uuid("facts:1"), md5_uuid("facts:2"), md5_uuid("facts:3")]
    assert links == [md5_uuid("links:1")]
