"""kernel-oracle plugin for b12x, the SM120/SM121 (consumer/workstation Blackwell) kernel library.

Importing this package imports neither torch nor b12x: the declarations live in
`kernels.yaml`, and the kernel classes (`linear`, `moe`, `embedding`) import b12x
lazily through `oracle_b12x.library` when an engine instantiates them.

The supported b12x version range has one home, the `packages.b12x` requirement in
`kernels.yaml` (the engine checks it at selection, `library` at import); the pinned
release in pyproject.toml is the one it is conformance-tested against.
"""
