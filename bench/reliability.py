"""Reliability figures anyone can rerun, printed as one table.

Built so far: the malformed-input catalogue (`tests/reliability/catalogue.py`): every case is
run through the entry point a user would hit (the workflow or `python -m srb`) and must stop
non-zero, with a message naming the file, the record and the field, leaving no output behind.
Not built yet (issue 13): the kill -9 sweep, the LLM fault proxy, the listening-socket and
canary-secret scans; this script says so rather than printing figures for them.

    python bench/reliability.py [--only NAME ...] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.reliability.catalogue import CASES, run_case  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="run the cases whose name contains one of these")
    parser.add_argument("--workdir", help="keep each case's files here (default: a temp dir)")
    args = parser.parse_args()
    root = Path(args.workdir or tempfile.mkdtemp(prefix="srb-reliability-"))
    cases = [
        c for c in CASES if not args.only or any(o.lower() in c.name.lower() for o in args.only)
    ]
    print("| # | area | malformed input | exit | named | outputs left | message |")
    print("|---|---|---|---|---|---|---|")
    ok = 0
    started = time.monotonic()
    for i, case in enumerate(cases, start=1):
        o = run_case(case, root / f"case{i:02d}")
        ok += o.ok
        named = "yes" if not o.missing else f"NO: lacks {', '.join(o.missing)}"
        left = ", ".join(o.left) or "none"
        message = o.message.replace("|", "\\|").replace(str(root / f"case{i:02d}"), "<workdir>")
        print(f"| {i} | {case.area} | {case.name} | {o.returncode} | {named} | {left} | "
              f"{message} |", flush=True)  # fmt: skip
    print()
    print(f"malformed inputs: {ok}/{len(cases)} clear errors "
          f"({time.monotonic() - started:.0f} s; files under {root})")  # fmt: skip
    print("not built yet: kill -9 sweep, LLM fault proxy, listening-socket scan, canary secret")
    return 0 if ok == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
