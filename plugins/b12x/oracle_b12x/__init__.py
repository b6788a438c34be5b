"""kernel-oracle plugin for b12x, the SM120/SM121 (consumer/workstation Blackwell) kernel library.

Importing this package imports neither torch nor b12x: the declarations live in
`kernels.yaml`, and the kernel classes (`linear`, `moe`, `embedding`) import b12x
lazily through `oracle_b12x.library` when an engine instantiates them.
"""

#: The b12x release this plugin was written and conformance-tested against.
TESTED_B12X = "1.5.1"
