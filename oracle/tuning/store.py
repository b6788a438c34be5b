"""Reading and writing tuning files: clear errors, atomic replacement, merging under a lock.

A write takes an exclusive lock on `FILE.lock` (fcntl), reads what is there, merges the
new entries in (the newer figure wins per layer, candidate and M), writes a temporary
file in the same folder, fsyncs it and `os.replace`s it over FILE. Two `oracle tune`
runs on one file therefore serialize their merges and lose no entries, and a reader
never sees a half-written file.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from pydantic import ValidationError

from ..errors import InputError
from .schema import TuningFile

try:  # POSIX; elsewhere writes are still atomic, only concurrent merges are unguarded
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


class TuningFileError(InputError):
    """A tuning file that cannot be read: not JSON, or not the schema."""


def read(path: str | Path) -> TuningFile:
    """Parse and validate a tuning file; errors name the file and the field."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise TuningFileError("no such tuning file (write one with `oracle tune --out FILE`)",
                              source=str(path)) from None
    except OSError as exc:
        raise TuningFileError(f"cannot read: {exc.strerror or exc}", source=str(path)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TuningFileError(f"not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                              source=str(path)) from None
    if not isinstance(data, dict):
        raise TuningFileError(f"expected a JSON object with schema_version, metadata and entries, got "
                              f"{type(data).__name__}", source=str(path))
    version = data.get("schema_version")
    if version != 1:
        raise TuningFileError(f"expected 1 (this oracle reads tuning schema 1), got {version!r}",
                              source=str(path), field="schema_version")
    try:
        return TuningFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise TuningFileError(f"{first['msg']} (got {_short(first.get('input'))})", source=str(path),
                              field=where) from None


def _short(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path`'s sibling lock file."""
    lock_path = path.with_name(path.name + ".lock")
    with open(lock_path, "a") as fh:
        if fcntl is not None:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, fsync, then replace `path` in one step."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def merge_into(path: str | Path, new: TuningFile,
               keep_existing: Callable[[TuningFile], bool] = lambda _: True) -> TuningFile:
    """Merge `new` into the file at `path` (created if absent) atomically, under the lock.

    `keep_existing(old)` decides whether the entries already there are kept (a caller
    drops a stale file's entries); a corrupt existing file is an error, never overwritten.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path):
        merged = new
        if path.exists():
            old = read(path)
            if keep_existing(old):
                merged = old.merged_with(new)
        write_atomic(path, merged.model_dump_json(indent=1) + "\n")
    return merged
