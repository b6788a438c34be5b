"""Finding and reading a model's configuration files, with errors that name file and key.

`--model` may be a folder, a `config.json`, or the bare name of an example that ships
with the package (`oracle/_data/examples/NAME`). Sibling quantization files
(`hf_quant_config.json` from ModelOpt, `quantize_config.json` from GPTQ/AWQ tools)
are read when present, because the quantization is often declared there, not in
config.json.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..resources import data_dir
from ..sources import display_path, read_bounded_text

SIBLING_QUANT_FILES = ("hf_quant_config.json", "quantize_config.json")
INDEX_FILE = "model.safetensors.index.json"
_MISSING = object()

#: Limits on config files (docs/user-guide.md, "Limits"): far above any real checkpoint.
MAX_CONFIG_BYTES = 16 << 20         # config.json and siblings are KiB; tensor indexes are not read
MAX_CONFIG_DEPTH = 64               # nesting of objects and arrays
MAX_CONFIG_INT = 1 << 24            # any size or count read from a config
#: Tighter bounds for counts that multiply the work (one entry per layer per rank).
CONFIG_INT_BOUNDS = {"num_hidden_layers": 1024, "num_local_experts": 1 << 16, "num_experts": 1 << 16,
                     "n_routed_experts": 1 << 16}


class ConfigView:
    """A JSON mapping that remembers its file and key path, so errors can name both."""

    __slots__ = ("data", "source", "prefix")

    def __init__(self, data: dict, source: str, prefix: str = ""):
        self.data = data
        self.source = source
        self.prefix = prefix

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def __contains__(self, name: str) -> bool:
        return name in self.data

    def raw(self, name: str, default: Any = None) -> Any:
        return self.data.get(name, default)

    def error(self, name: str, message: str) -> InputError:
        return InputError(message, source=self.source, field=self.key(name))

    def _get(self, name: str, default: Any, what: str, ok: Any, shown: Any = repr) -> Any:
        """The value of `name` if `ok(value)`; `null` counts as missing (the default, else an error)."""
        value = self.data.get(name)
        if value is None:
            if default is _MISSING:
                raise self.error(name, f"required key is missing; expected {what}")
            return default
        if not ok(value):
            raise self.error(name, f"expected {what}, got {shown(value)}")
        return value

    def int(self, name: str, default: Any = _MISSING, *, minimum: int = 1) -> int:
        """A required (or defaulted) integer in minimum..bound; `null` counts as missing."""
        value = self._get(name, default, "an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
        if self.data.get(name) is not None:
            maximum = CONFIG_INT_BOUNDS.get(name, MAX_CONFIG_INT)
            if not minimum <= value <= maximum:
                raise self.error(name, f"expected an integer from {minimum} to {maximum}, got {value}")
        return value

    def opt_int(self, name: str, *, minimum: int = 1) -> int | None:
        return self.int(name, None, minimum=minimum)

    def str(self, name: str, default: Any = _MISSING) -> str:
        return self._get(name, default, "a string", lambda v: isinstance(v, str))

    def bool(self, name: str, default: bool) -> bool:
        return self._get(name, default, "true or false", lambda v: isinstance(v, bool))

    def float(self, name: str, default: Any = _MISSING) -> float:
        """A finite number (NaN and Infinity are refused: no kernel can honour them)."""
        value = self._get(name, default, "a finite number",
                          lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
        return float(value) if self.data.get(name) is not None else value

    def list(self, name: str, default: Any = _MISSING) -> list:
        return self._get(name, default, "a list", lambda v: isinstance(v, list), lambda v: type(v).__name__)

    def str_list(self, name: str) -> list[str]:
        items = self.list(name, [])
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise self.error(f"{name}[{i}]", f"expected a string, got {item!r}")
        return items

    def int_list(self, name: str, default: Any = _MISSING) -> list[int]:
        """A list of integers (layer indices and the like); anything else names the bad item."""
        items = self.list(name, default)
        for i, item in enumerate(items or []):
            if not isinstance(item, int) or isinstance(item, bool):
                raise self.error(f"{name}[{i}]", f"expected an integer, got {item!r:.60}")
        return items

    def sub(self, name: str, *, required: bool = False) -> "ConfigView | None":
        """A nested mapping as its own view (None when absent or null, unless required)."""
        value = self.data.get(name)
        if value is None:
            if required:
                raise self.error(name, "required key is missing; expected a mapping")
            return None
        if not isinstance(value, dict):
            raise self.error(name, f"expected a mapping, got {type(value).__name__}")
        return ConfigView(value, self.source, f"{self.key(name)}.")


@dataclass
class ModelFiles:
    """The files of one model: config.json and any sibling quantization file."""

    name: str
    config_path: Path
    config: ConfigView
    siblings: dict[str, ConfigView] = field(default_factory=dict)
    example: bool = False
    index: ConfigView | None = None        # model.safetensors.index.json beside config.json

    def quantized_tensor_modules(self, suffixes: frozenset[str]) -> set[str]:
        """Checkpoint modules of the index that carry one of `suffixes` (quantization companion tensors)."""
        if self.index is None:
            return set()
        out = set()
        for tensor in self.index.data["weight_map"]:
            module, _, suffix = tensor.rpartition(".")
            if suffix in suffixes:
                out.add(module)
        return out

    def tensor_modules(self) -> list[str]:
        """The checkpoint's module names from the safetensors index (tensor names less the last part)."""
        if self.index is None:
            return []
        return sorted({t.rsplit(".", 1)[0] for t in self.index.data["weight_map"]})

    @property
    def paths(self) -> list[str]:
        """The files read, as reports show them (shipped examples as examples/NAME/FILE)."""
        files = [self.config_path, *(self.config_path.with_name(n) for n in self.siblings)]
        if self.index is not None:
            files.append(self.config_path.with_name(INDEX_FILE))
        if self.example:
            return [f"examples/{p.parent.name}/{p.name}" for p in files]
        return [display_path(p) for p in files]


def example_names() -> list[str]:
    """The example models shipped with the package."""
    root = data_dir("examples")
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "config.json").is_file())


def resolve_config_path(model: str) -> tuple[Path, bool]:
    """`model` as given on the command line -> (config.json path, is a shipped example)."""
    path = Path(model).expanduser()
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise InputError("folder has no config.json", source=str(path), field="--model")
        return config, False
    if path.is_file():
        return path, False
    looks_like_path = any(sep in model for sep in ("/", "\\")) or model.endswith(".json")
    if not looks_like_path:
        candidate = data_dir("examples") / model / "config.json"
        if candidate.is_file():
            return candidate, True
        shipped = ", ".join(example_names()) or "(none)"
        raise InputError(f"no such file, folder or shipped example; shipped examples: {shipped}",
                         source=model, field="--model")
    raise InputError("file not found", source=str(path), field="--model")


def read_json(path: Path) -> ConfigView:
    """A JSON object file as a ConfigView; one clear error for every way it can be wrong."""
    source = str(path)
    text = read_bounded_text(path, MAX_CONFIG_BYTES, "a model config", InputError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                         source=source) from None
    except RecursionError:
        raise InputError(f"JSON nested deeper than {MAX_CONFIG_DEPTH} levels", source=source) from None
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object at the top level, got {type(data).__name__}",
                         source=source)
    _check_tree(data, source)
    return ConfigView(data, source)


def _check_tree(data: Any, source: str) -> None:
    """Refuse nesting deeper than MAX_CONFIG_DEPTH and text that is not Unicode (lone surrogates).

    Iterative, so a deep document cannot exhaust the stack; the error names the key path.
    """
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_CONFIG_DEPTH:
            raise InputError(f"nested deeper than {MAX_CONFIG_DEPTH} levels", source=source, field=path[:120])
        if isinstance(value, dict):
            for key, item in value.items():
                _check_text(key, source, f"{path}.{key}" if path else key)
                stack.append((item, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))
        elif isinstance(value, str):
            _check_text(value, source, path)


def _check_text(text: str, source: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = path.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        raise InputError("text contains a lone UTF-16 surrogate (\\ud800-\\udfff escape); expected valid "
                         "Unicode", source=source, field=shown or "(top level)") from None


def load_model_files(model: str) -> ModelFiles:
    config_path, example = resolve_config_path(model)
    config = read_json(config_path)
    siblings = {}
    if config_path.name == "config.json":
        for name in SIBLING_QUANT_FILES:
            sibling = config_path.with_name(name)
            if sibling.is_file():
                siblings[name] = read_json(sibling)
    index = None
    if config_path.name == "config.json" and config_path.with_name(INDEX_FILE).is_file():
        index = read_index(config_path.with_name(INDEX_FILE))
    name = config_path.parent.name if config_path.name == "config.json" else config_path.stem
    return ModelFiles(name=name or str(config_path), config_path=config_path, config=config,
                      siblings=siblings, example=example, index=index)


def read_index(path: Path) -> ConfigView:
    """A safetensors index: weight_map must map tensor names to shard files in the same folder.

    A folder with none of the shards (config and index only, as fetched to inspect a model
    before downloading it) is fine; a folder with some shards but not all is an incomplete
    download, and an error naming the first missing shard.
    """
    view = read_json(path)
    weight_map = view.sub("weight_map", required=True)
    if not weight_map.data:
        raise view.error("weight_map", "expected at least one tensor name")
    shards = set()
    for tensor, shard in weight_map.data.items():
        if not isinstance(shard, str) or not shard or "/" in shard or "\\" in shard:
            raise weight_map.error(tensor, f"expected a shard file name in the same folder, got {shard!r}")
        shards.add(shard)
    present = {s for s in shards if (path.parent / s).is_file()}
    if present and present != shards:
        missing = sorted(shards - present)
        tensor = next(t for t, s in weight_map.data.items() if s == missing[0])
        raise weight_map.error(tensor, f"shard {missing[0]!r} does not exist beside the index "
                               f"({len(missing)} of {len(shards)} shards missing)")
    return view
