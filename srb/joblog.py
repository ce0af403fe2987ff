"""Logging for one workflow job: everything (Python, JVM, tqdm) into the job's `log:` file.

File descriptors 1 and 2 are redirected, so output written by native code (Lucene's JVM) lands
in the log too; a failure is also summarised on the original stderr so the console names it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def job_logging(log_file: str | Path, job: str) -> Iterator[logging.Logger]:
    log_file = Path(log_file)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    saved_stderr = os.dup(2)
    sys.stdout.flush()
    sys.stderr.flush()
    with open(log_file, "w", encoding="utf-8") as fh:
        os.dup2(fh.fileno(), 1)
        os.dup2(fh.fileno(), 2)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns the log
    logger = logging.getLogger(job)
    try:
        yield logger
    except Exception as exc:
        logger.exception("%s failed", job)
        os.write(saved_stderr, f"srb: {job} failed: {exc}\n  (details: {log_file})\n".encode())
        sys.exit(1)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
