"""The one way oracle reads and writes a path a user names: regular files only, bounded, checked early.

Every file a user gives (policy and kernels files, tuning files from `--measurements`,
ORACLE_MEASUREMENTS or a policy's `measurements.files`, `oracle tune --out`, its lock and
`--plot`) goes through here, so a FIFO, `/dev/zero`, `/dev/urandom` or a directory is one
clear error instead of a read without end or a block on open, and a file larger than its
stated limit is refused before it is read. Output paths are checked *before* any work
(`check_output`), so an unwritable `--out` is found in milliseconds, not after every
candidate was timed; writes go to a temporary file beside the target and replace it in one
step, so a failure leaves no partial file. The limits are stated in docs/user-guide.md
("Limits").
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from .errors import InputError

#: Largest tuning file read (a full sweep of a large MoE model is a few MiB).
MAX_TUNING_BYTES = 64 << 20
#: Largest JSON sidecar of a checkpoint read whole (config.json, generation_config.json, index).
MAX_JSON_BYTES = 16 << 20
#: Deepest JSON nesting accepted (tuning files and checkpoint configs are 3-6 levels deep).
MAX_JSON_DEPTH = 64

_KIND = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((what for test, what in _KIND if test(mode)), "not a regular file")


def read_bytes(path: str | Path, limit: int, *, what: str, error: type[InputError] = InputError,
               label: str | None = None) -> bytes:
    """The bytes of regular file `path`, at most `limit` of them; anything else is one `error`.

    Opened non-blocking (a FIFO without a writer cannot block the open), checked with fstat on
    the open descriptor (no race with a swapped path), and read to at most limit + 1 bytes (a
    file that grows, or a /proc file whose size says 0, cannot make the read endless)."""
    source = label or str(path)
    try:
        fd = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise error("file not found", source=source) from None
    except OSError as exc:
        raise error(f"cannot open: {exc.strerror or exc}", source=source) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"expected a regular file ({what}), got {_kind(info.st_mode)}", source=source)
        if info.st_size > limit:
            raise error(f"file is {info.st_size} bytes, over the limit of {limit} bytes for {what}", source=source)
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise error(f"file grew past the limit of {limit} bytes for {what} while being read", source=source)
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", source=source) from None
    finally:
        os.close(fd)


def read_text(path: str | Path, limit: int, *, what: str, error: type[InputError] = InputError,
              label: str | None = None) -> str:
    """`read_bytes` decoded as UTF-8; bytes that are not UTF-8 are one error naming the byte offset."""
    data = read_bytes(path, limit, what=what, error=error, label=label)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text: byte {exc.start} ({data[exc.start:exc.start + 1]!r}) {exc.reason}",
                    source=label or str(path)) from None


def load_json(text: str, *, source: str, error: type[InputError] = InputError,
              max_depth: int = MAX_JSON_DEPTH) -> object:
    """Strict JSON (no NaN/Infinity literals), nested at most `max_depth` deep; errors name the line."""
    import json

    def refuse(token: str) -> float:
        raise ValueError(f"{token} is not JSON (numbers must be finite)")
    try:
        data = json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError as exc:
        raise error(f"not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", source=source) from None
    except ValueError as exc:
        raise error(f"not valid JSON: {exc}", source=source) from None
    except RecursionError:
        raise error(f"JSON nested deeper than {max_depth} levels", source=source) from None
    if _depth(data, max_depth) > max_depth:
        raise error(f"JSON nested deeper than {max_depth} levels", source=source)
    return data


def _depth(value: object, limit: int) -> int:
    """Nesting depth of `value`, counted iteratively (stops once past `limit`)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if deepest > limit:
                return deepest
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def read_json(path: str | Path, limit: int, *, what: str, error: type[InputError] = InputError,
              label: str | None = None) -> object:
    """A bounded, regular, UTF-8 JSON file (see read_bytes and load_json)."""
    label = label or str(path)
    return load_json(read_text(path, limit, what=what, error=error, label=label), source=label, error=error)


def check_output(path: str | Path, *, field: str, what: str, create_parent: bool = False) -> Path:
    """Refuse an output path that could not be written, before any work is done.

    The path must be absent or a regular file we may replace; its folder must exist (or, with
    `create_parent`, be creatable) and take a new file (probed by creating and removing one,
    which also catches read-only file systems and root-owned folders)."""
    p = Path(path)
    if not str(path).strip():
        raise InputError(f"empty path; expected a file name for {what}", field=field)
    try:
        info = os.stat(p)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise InputError(f"cannot use {str(p)!r} for {what}: {exc.strerror or exc}", field=field) from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise InputError(f"{str(p)!r} is {_kind(info.st_mode)}; expected a regular file (or a new one) for {what}",
                         field=field)
    parent = p.parent
    if not parent.is_dir():
        ancestor = next((a for a in parent.parents if a.exists()), None)
        if not create_parent or ancestor is None or not ancestor.is_dir():
            raise InputError(f"folder {str(parent)!r} does not exist; create it first ({what})", field=field)
        parent = ancestor
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{p.name[:40]}.", suffix=".probe", dir=str(parent))
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(f"cannot write in folder {str(parent)!r} ({what}): {exc.strerror or exc}",
                         field=field) from None
    return p


def write_atomic(path: str | Path, write: Callable[[str], None]) -> None:
    """Call `write(tmp)` for a temporary file beside `path`, fsync it, then replace `path` in one step.

    On any failure the temporary file is removed: `path` is either the old file or the new one."""
    p = Path(path)
    # the target's suffix kept last: writers that pick a format by extension (matplotlib) still see it
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name[:40]}.", suffix=f".tmp{p.suffix[:16]}", dir=str(p.parent))
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
    write_atomic(path, write)


@contextlib.contextmanager
def lock_file(path: str | Path, *, field: str) -> Iterator[int]:
    """An open descriptor of lock file `path` (created if absent; must be a regular file), for flock."""
    p = Path(path)
    try:
        fd = os.open(os.fspath(p), os.O_RDWR | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0),
                     0o644)
    except OSError as exc:
        raise InputError(f"cannot open lock file {str(p)!r}: {exc.strerror or exc}", field=field) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(f"lock file {str(p)!r} is {_kind(mode)}; expected a regular file", field=field)
        yield fd
    finally:
        os.close(fd)
