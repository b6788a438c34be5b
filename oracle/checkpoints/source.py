"""A checkpoint's tensors by name, read lazily from safetensors shards.

Only the headers are read up front (names, dtypes, shapes, and which file holds
each); a tensor's bytes are read when an adapter asks for it, so peak memory
follows the layer being converted, not the checkpoint. Every name handed out is
recorded, so the loader can list the tensors nobody claimed.

Bytes are read with positioned reads into memory the tensor owns, not through a memory
map: a map kept open for the whole load (safetensors' safe_open) keeps every page it has
touched in the process's resident set until it closes, so a load that streams layer by
layer would still peak at the whole checkpoint's size on top of what it built. A dtype
this reader does not know falls back to safe_open for that one tensor.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from ..errors import InputError


class CheckpointError(InputError):
    """A checkpoint tensor or file that is not what the dialect prescribes; names both."""

    def __init__(self, message: str, *, tensor: str | None = None, file: str | None = None):
        self.tensor, self.file = tensor, file
        where = ": ".join(p for p in (file, tensor) if p)
        super().__init__(f"{where}: {message}" if where else message)


class TensorSource:
    """Tensor name -> file, from model.safetensors.index.json or the *.safetensors headers."""

    #: True for a source that makes its tensors' values itself from a quantizer (bench/synthetic.py): the
    #: adapter's per-tensor value scans (NaN codes, scale signs; a device sync each) are skipped there
    made_here: bool = False

    def __init__(self, files: dict[str, Path], root: Path | None = None,
                 headers: dict[str, dict] | None = None):
        self.files = files                 # tensor name -> shard path
        self.root = root
        self.claimed: set[str] = set()
        self._handles: dict[Path, Any] = {}    # shard -> open file (positioned reads)
        self._data_start: dict[Path, int] = {}  # shard -> offset of its data (8 + header length)
        self._headers = headers            # tensor name -> its safetensors header entry, read on demand

    # ---- construction ---------------------------------------------------------------
    @classmethod
    def from_dir(cls, directory: str | Path) -> "TensorSource":
        root = Path(directory)
        index = root / "model.safetensors.index.json"
        files: dict[str, Path] = {}
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (ValueError, KeyError, TypeError) as exc:
                raise CheckpointError(f"not a safetensors index with a weight_map ({exc})", file=str(index)) from None
            for name, shard in weight_map.items():
                path = root / shard
                if not path.is_file():
                    raise CheckpointError(f"shard {shard!r} listed in {index.name} (holding {name}) is absent",
                                          tensor=name, file=str(path))
                files[name] = path
        else:
            shards = sorted(root.glob("*.safetensors"))
            if not shards:
                raise CheckpointError("no *.safetensors file and no model.safetensors.index.json", file=str(root))
            for shard in shards:
                for name in _header_names(shard):
                    if name in files:   # no index to say which copy is meant: neither wins silently
                        raise CheckpointError(f"tensor is in two shards, {files[name].name} and {shard.name}, and "
                                              "no model.safetensors.index.json says which to read", tensor=name,
                                              file=str(shard))
                    files[name] = shard
        return cls(files, root)

    # ---- access ---------------------------------------------------------------------------
    def __contains__(self, name: str) -> bool:
        return name in self.files

    def names(self) -> Iterable[str]:
        return self.files.keys()

    def file(self, name: str) -> str:
        path = self.files.get(name)
        return str(path) if path is not None else str(self.root or "checkpoint")

    def header(self, name: str) -> dict:
        """The safetensors header entry of `name` ({"dtype": "BF16", "shape": [...], ...}); no data read."""
        if self._headers is None:
            self._headers = {}
            for shard in sorted(set(self.files.values())):
                self._headers.update(_header(shard))
        entry = self._headers.get(name)
        if entry is None:
            raise CheckpointError("missing tensor", tensor=name, file=self.file(name))
        return entry

    def dtype(self, name: str) -> str:
        """The safetensors dtype name of `name` (F32, BF16, F8_E4M3, U8, I32 ...), from the header (sources
        without files, such as generated ones, from the tensor itself)."""
        path = self.files.get(name)
        if path is not None and not path.is_file():
            t = self.peek(name)
            return _SAFETENSORS_DTYPES.get(str(t.dtype).removeprefix("torch."), str(t.dtype))
        return str(self.header(name).get("dtype"))

    def peek(self, name: str) -> Any:
        """The tensor, read without claiming it (the loader looking before it decides)."""
        was = name in self.claimed
        t = self.get(name)
        if not was:
            self.claimed.discard(name)
        return t

    def get(self, name: str) -> Any:
        """The tensor (read now, into memory it owns), marked claimed."""
        path = self.files.get(name)
        if path is None:
            raise CheckpointError("missing tensor", tensor=name, file=str(self.root or "checkpoint"))
        entry = self.header(name)
        dtype = _torch_dtype(entry.get("dtype"))
        tensor = self._read(path, name, entry, dtype) if dtype is not None else self._mapped(path, name)
        self.claimed.add(name)
        return tensor

    def _read(self, path: Path, name: str, entry: dict, dtype: Any) -> Any:
        import os

        import torch
        try:
            start, end = (int(v) for v in entry["data_offsets"])
            shape = [int(d) for d in entry["shape"]]
            fh = self._handles.get(path)
            if fh is None:
                fh = self._handles[path] = path.open("rb")
                self._data_start[path] = 8 + int.from_bytes(os.pread(fh.fileno(), 8, 0), "little")
            size = end - start
            data = torch.empty(size, dtype=torch.uint8)
            if size:
                got = os.preadv(fh.fileno(), [data.numpy()], self._data_start[path] + start)
                if got != size:
                    raise ValueError(f"{got} of {size} bytes read (the file is shorter than its header says)")
            return data.view(dtype).reshape(shape)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
            raise CheckpointError(f"cannot read tensor ({exc})", tensor=name, file=str(path)) from None

    def _mapped(self, path: Path, name: str) -> Any:
        """One tensor through safetensors' own reader (dtypes _torch_dtype does not name), its map closed after."""
        from safetensors import safe_open
        try:
            with safe_open(str(path), framework="pt") as handle:
                return handle.get_tensor(name).clone()
        except Exception as exc:  # safetensors raises its own error types for bad headers
            raise CheckpointError(f"cannot read tensor ({exc})", tensor=name, file=str(path)) from None

    def stored_bytes(self) -> int:
        """Bytes of every shard this source reads (the preflight size check compares them with the config)."""
        import os
        return sum(os.stat(p).st_size for p in set(self.files.values()))

    def unclaimed(self) -> list[str]:
        return sorted(set(self.files) - self.claimed)

    def close(self) -> None:
        for fh in self._handles.values():
            fh.close()
        self._handles.clear()


class DictSource(TensorSource):
    """In-memory tensors (tests, or tensors already loaded): the same interface."""

    def __init__(self, tensors: dict[str, Any], file: str = "<memory>"):
        super().__init__({n: Path(file) for n in tensors}, None)
        self.tensors = tensors

    def stored_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def get(self, name: str) -> Any:
        if name not in self.tensors:
            raise CheckpointError("missing tensor", tensor=name, file="<memory>")
        self.claimed.add(name)
        return self.tensors[name]

    def header(self, name: str) -> dict:
        if name not in self.tensors:
            raise CheckpointError("missing tensor", tensor=name, file="<memory>")
        t = self.tensors[name]
        return {"dtype": _SAFETENSORS_DTYPES.get(str(t.dtype).removeprefix("torch."), str(t.dtype)),
                "shape": list(t.shape)}


_SAFETENSORS_DTYPES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16", "float8_e4m3fn": "F8_E4M3",
                       "uint8": "U8", "int8": "I8", "int32": "I32", "int64": "I64"}


def _torch_dtype(name: Any) -> Any:
    """The torch dtype of a safetensors dtype name, or None where this torch has no such dtype."""
    import torch
    attr = _TORCH_DTYPES.get(str(name))
    return getattr(torch, attr, None) if attr else None


_TORCH_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                 "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
                 "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu"}


def _header_names(shard: Path) -> list[str]:
    """Tensor names from a safetensors header (8-byte length + JSON), without reading data."""
    return list(_header(shard))


def _header(shard: Path) -> dict[str, dict]:
    """A safetensors header (8-byte length + JSON): tensor name -> dtype, shape, offsets."""
    try:
        with shard.open("rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            if size <= 0 or size > 100_000_000:
                raise ValueError(f"implausible header length {size}")
            header = json.loads(fh.read(size))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"not a safetensors file ({exc})", file=str(shard)) from None
    if not isinstance(header, dict):
        raise CheckpointError("not a safetensors file (its header is not a JSON object)", file=str(shard))
    return {k: v for k, v in header.items() if k != "__metadata__"}
