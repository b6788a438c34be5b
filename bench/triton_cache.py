"""Carry Triton's compile cache from one device round to the next (each round runs on a fresh machine).

A round's seconds went to compiling: R14 and R15 of the sixth session timed nothing because the
kernels compiled inside the allowance. Triton keys its cache by the kernel source, the options and
its own build, not by the machine, so a cache filled on one H200 with the same image serves the next.

    pack DIR OUT.tgz    # the compiled binaries, their metadata and the launchers (no IR text), group
                        # files' absolute paths made relative (the next machine's checkout may differ)
    unpack TGZ DIR      # into DIR, group files pointing at DIR again; then export TRITON_CACHE_DIR=DIR
"""
from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

KEEP = (".cubin", ".json", ".so")          # what a cache hit loads (CompiledKernel: metadata + binary)
PREFIX = "__grp__"


def pack(src: Path, out: Path) -> int:
    n = 0
    with tarfile.open(out, "w:gz") as tar:
        for f in sorted(src.rglob("*")):
            if not f.is_file() or not f.name.endswith(KEEP):
                continue
            rel = f.relative_to(src)
            data = f.read_bytes()
            if f.name.startswith(PREFIX):
                grp = json.loads(data)
                grp["child_paths"] = {c: str(Path(p).relative_to(src)) for c, p in grp["child_paths"].items()
                                      if p.endswith(KEEP) and Path(p).is_relative_to(src)}
                data = json.dumps(grp).encode()
            info = tarfile.TarInfo(str(rel))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            n += 1
    return n


def unpack(tgz: Path, dst: Path) -> int:
    dst = dst.resolve()
    n = 0
    with tarfile.open(tgz) as tar:
        for member in tar.getmembers():
            if not member.isfile() or member.name.startswith(("/", "..")) or "/../" in member.name:
                continue
            data = tar.extractfile(member).read()
            if Path(member.name).name.startswith(PREFIX):
                grp = json.loads(data)
                grp["child_paths"] = {c: str(dst / p) for c, p in grp["child_paths"].items()}
                data = json.dumps(grp).encode()
            path = dst / member.name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            n += 1
    return n


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("pack", "unpack"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "pack":
        print(f"packed {pack(Path(argv[1]).resolve(), Path(argv[2]))} files")
    else:
        print(f"unpacked {unpack(Path(argv[1]), Path(argv[2]))} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
