"""The two user-facing error types, at the bottom of the package so any layer may raise them."""

from __future__ import annotations

from pathlib import Path


class ConfigError(ValueError):
    """A config value that cannot work; the message names the config key."""


class DataError(ValueError):
    """Bad input, located precisely enough to fix by hand."""

    def __init__(self, file: str | Path, record: str | int | None, field: str | None, message: str):
        self.file, self.record, self.field = str(file), record, field
        where = f"{file}"
        if record is not None:
            where += f", record {record}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")
