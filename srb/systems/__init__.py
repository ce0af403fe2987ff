"""Registry of memory systems: every module in this package that defines `SYSTEM` is one.

Adding a system means adding one module here (plus a rule file only if its ingestion is not
the shared unit -> index path); nothing else in the workflow changes.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from srb.systems.base import SystemSpec


@cache
def registry() -> dict[str, SystemSpec]:
    systems: dict[str, SystemSpec] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        spec = getattr(module, "SYSTEM", None)
        if isinstance(spec, SystemSpec):
            systems[spec.name] = spec
    return systems


def get_system(name: str) -> SystemSpec:
    systems = registry()
    if name not in systems:
        raise KeyError(f"unknown system {name!r}; known systems: {', '.join(sorted(systems))}")
    return systems[name]
