"""Registry of memory systems: every module in this package that defines `SYSTEM` is one.

A `SystemSpec` is a unit system (exact character spans indexed by the workflow); a
`StoreSystem` owns its store (srb.systems.store). Adding either is one module here plus config
(and, for a store system, its envs/<name>.txt); nothing else in the workflow changes.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Any

from srb.systems.base import SystemSpec
from srb.systems.store import StoreSystem


@cache
def _all_systems() -> dict[str, Any]:
    systems: dict[str, Any] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in ("base", "store"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        spec = getattr(module, "SYSTEM", None)
        if isinstance(spec, SystemSpec | StoreSystem):
            systems[spec.name] = spec
    return systems


def registry() -> dict[str, SystemSpec]:
    """The unit systems."""
    return {k: v for k, v in _all_systems().items() if isinstance(v, SystemSpec)}


def store_registry() -> dict[str, StoreSystem]:
    """The systems that own their store."""
    return {k: v for k, v in _all_systems().items() if isinstance(v, StoreSystem)}


def get_store_system(name: str) -> StoreSystem:
    systems = store_registry()
    if name not in systems:
        raise KeyError(
            f"unknown store system {name!r}; known store systems: {', '.join(sorted(systems))}"
        )
    return systems[name]


def get_system(name: str) -> SystemSpec:
    systems = registry()
    if name not in systems:
        raise KeyError(f"unknown system {name!r}; known systems: {', '.join(sorted(systems))}")
    return systems[name]
