"""Put on PYTHONPATH of a Python where flashinfer-python's b12x shim is active, this turns it into a
flashinfer-only install (what `flashinfer-python[b12x]` gives): the `b12x` distribution's metadata
disappears, so only provider detection can find b12x. The standalone package's files stay on disk,
shadowed by the shim exactly as before. Used by test_b12x_provider.py in .venv-flashinfer."""
import importlib.machinery
import sys


class _WithoutB12xDistribution(importlib.machinery.PathFinder):
    @classmethod
    def find_distributions(cls, *args, **kwargs):
        for dist in super().find_distributions(*args, **kwargs):
            if (dist.metadata["Name"] or "").lower() != "b12x":
                yield dist


sys.meta_path[:] = [_WithoutB12xDistribution if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
