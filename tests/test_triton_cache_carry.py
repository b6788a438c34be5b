"""bench/triton_cache.py carries Triton's compile cache between device rounds (each runs on a fresh
machine): a packed cache unpacked elsewhere must give group files whose paths exist there and name
only the binaries and metadata (what a cache hit loads), never the machine it was packed on."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from triton_cache import pack, unpack  # noqa: E402


def _fake_cache(root: Path) -> None:
    d = root / "KEY1"
    d.mkdir(parents=True)
    children = {}
    for name, data in (("k.cubin", b"\x7fELF"), ("k.json", b"{}"), ("k.ptx", b"ptx"), ("k.llir", b"ir")):
        (d / name).write_bytes(data)
        children[name] = str(d / name)
    (d / "__grp__k.json").write_text(json.dumps({"child_paths": children}))
    (root / "KEY2").mkdir()
    (root / "KEY2" / "launcher.so").write_bytes(b"so")


def test_pack_then_unpack_points_the_groups_at_the_new_place(tmp_path):
    src, dst = tmp_path / "machine1" / "cache", tmp_path / "machine2" / "cache"
    _fake_cache(src)
    tgz = tmp_path / "c.tgz"
    assert pack(src, tgz) == 4                   # cubin, metadata, group, launcher; no IR text
    assert unpack(tgz, dst) == 4
    grp = json.loads((dst / "KEY1" / "__grp__k.json").read_text())["child_paths"]
    assert set(grp) == {"k.cubin", "k.json"}
    assert all(Path(p).is_file() and Path(p).is_relative_to(dst) for p in grp.values())
    assert (dst / "KEY1" / "k.cubin").read_bytes() == b"\x7fELF"
    assert (dst / "KEY2" / "launcher.so").read_bytes() == b"so"
    assert not (dst / "KEY1" / "k.ptx").exists()
