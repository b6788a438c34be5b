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
from pathlib import Path
from typing import Callable, Iterator

from pydantic import ValidationError

from ..errors import InputError
from ..safeio import MAX_TUNING_BYTES, check_output, load_json, lock_file, read_text, write_text_atomic
from .schema import TuningFile

try:  # POSIX; elsewhere writes are still atomic, only concurrent merges are unguarded
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


class TuningFileError(InputError):
    """A tuning file that cannot be read: not JSON, or not the schema."""


def read(path: str | Path) -> TuningFile:
    """Parse and validate a tuning file (a bounded regular file, oracle.safeio); errors name file and field."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise TuningFileError("no such tuning file (write one with `oracle tune --out FILE`)", source=str(path))
    text = read_text(path, MAX_TUNING_BYTES, what="a tuning file", error=TuningFileError)
    data = load_json(text, source=str(path), error=TuningFileError)
    if not isinstance(data, dict):
        raise TuningFileError(f"expected a JSON object with schema_version, metadata and entries, got "
                              f"{type(data).__name__}", source=str(path))
    version = data.get("schema_version")
    if type(version) is not int or version != 1:
        raise TuningFileError(f"expected 1 (this oracle reads tuning schema 1), got {_short(version)}",
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


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path`'s sibling lock file (a regular file, oracle.safeio.lock_file)."""
    with lock_file(lock_path(path), field="--out") as fd:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)


def check_writable(path: str | Path) -> Path:
    """Before any timing: the tuning file, its lock and their folder can be written (else InputError)."""
    path = check_output(path, field="--out", what="the tuning file", create_parent=True)
    check_output(lock_path(path), field="--out", what="the tuning file's lock (FILE.lock)", create_parent=True)
    if path.exists():
        read(path)  # a corrupt file fails now, not after minutes of timing
    return path


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
        write_text_atomic(path, merged.model_dump_json(indent=1) + "\n")
    return merged
