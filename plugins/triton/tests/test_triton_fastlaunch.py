"""oracle_triton.fastlaunch on CPU with a stand-in kernel: the first launch of a key goes through
Triton's own path and keeps its compiled object; the next one starts that object directly with
every argument in the kernel's order (defaults filled in), on the current stream, with Triton's
launch hooks (and their metadata when a hook is installed); an unseen key or no key takes Triton's
path. (The GPU test checks real launches.)"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from oracle_triton import fastlaunch


class _Compiled:
    function, packed_metadata = "fn-handle", "meta"

    def __init__(self, log):
        self.log = log

    def run(self, *args):
        self.log.append(("direct",) + args[:7] + args[9:])

    def launch_metadata(self, grid, stream, *args):
        return ("meta-for", grid, stream)


class _Kernel:
    arg_names = ["x_ptr", "N", "BLOCK", "FLAG"]
    params = [SimpleNamespace(name=n, default=d, has_default=h)
              for n, d, h in (("x_ptr", None, False), ("N", None, False), ("BLOCK", None, False), ("FLAG", 7, True))]

    def __init__(self):
        self.log = []

    def __getitem__(self, grid):
        def launch(**kw):
            self.log.append(("triton", grid, kw))
            return _Compiled(self.log)
        return launch


@pytest.fixture
def kernel(monkeypatch):
    monkeypatch.setattr(fastlaunch, "current_stream", lambda: 99)
    monkeypatch.setattr(fastlaunch, "hooked", lambda: False)
    return _Kernel()


def test_second_launch_of_a_key_starts_the_compiled_kernel(kernel):
    fl = fastlaunch.FastLaunch(kernel)
    opts = {"num_warps": 4, "num_stages": 2}
    fl((2, 1, 1), "k", opts, x_ptr="X", N=16, BLOCK=32)
    fl((3, 1, 2), "k", opts, x_ptr="Y", N=16, BLOCK=32)
    assert kernel.log[0] == ("triton", (2, 1, 1), {"x_ptr": "X", "N": 16, "BLOCK": 32, "num_warps": 4, "num_stages": 2})
    assert kernel.log[1] == ("direct", 3, 1, 2, 99, "fn-handle", "meta", None, "Y", 16, 32, 7)


def test_unseen_or_missing_key_take_tritons_path_and_hooks_get_metadata(kernel, monkeypatch):
    fl = fastlaunch.FastLaunch(kernel)
    opts = {"num_warps": 4, "num_stages": 2}
    fl((1, 1, 1), "a", opts, x_ptr="X", N=1, BLOCK=32)
    fl((1, 1, 1), "b", opts, x_ptr="X", N=1, BLOCK=32)
    fl((1, 1, 1), None, opts, x_ptr="X", N=1, BLOCK=32)
    fl((1, 1, 1), None, opts, x_ptr="X", N=1, BLOCK=32)
    assert [e[0] for e in kernel.log] == ["triton"] * 4
    monkeypatch.setattr(fastlaunch, "hooked", lambda: True)
    fl((1, 1, 1), "a", opts, x_ptr="X", N=1, BLOCK=32)
    assert kernel.log[-1][:8] == ("direct", 1, 1, 1, 99, "fn-handle", "meta", ("meta-for", (1, 1, 1), 99))


def test_spec_is_what_triton_specializes_on():
    import torch

    buf = torch.zeros(64, dtype=torch.bfloat16)
    assert fastlaunch.spec(buf, buf[1:], 1, 32, 33, "x") == (
        (torch.bfloat16, True), (torch.bfloat16, False), (True, False), (False, True), (False, False), "x")
    assert fastlaunch.spec(buf[8:]) == ((torch.bfloat16, True),)


def test_interpreted_kernels_never_go_fast():
    class Interpreted:
        arg_names = ["a"]

        def __getitem__(self, grid):
            return lambda **kw: None
    fl = fastlaunch.FastLaunch(Interpreted())
    assert not fl.enabled
    fl((1, 1, 1), "k", {"num_warps": 4, "num_stages": 1}, a=1)
    assert fl.compiled == {}
