"""Helpers shared by the b12x plugin tests (a uniquely named module, not conftest)."""
from __future__ import annotations

from pathlib import Path

KERNELS_YAML = Path(__file__).resolve().parents[1] / "oracle_b12x" / "kernels.yaml"


def require_b12x() -> None:
    """Skip (never fail) where no supported b12x provider is installed, e.g. a bare GPU machine."""
    import pytest

    from oracle_b12x.errors import B12xUnavailableError
    from oracle_b12x.provider import active_provider

    try:
        active_provider()
    except B12xUnavailableError as exc:
        pytest.skip(f"needs b12x: {exc}")


def load_specs() -> dict:
    """The plugin's native b12x KernelSpecs, loaded the way the engine loads them."""
    return load_kernel_specs(KERNELS_YAML.name)


def load_kernel_specs(file_name: str) -> dict:
    """The KernelSpecs of one of the plugin's kernel files (kernels.yaml, flashinfer_kernels.yaml)."""
    from oracle.catalog import load_kernel_file
    from oracle.sources import load_yaml_file

    path = KERNELS_YAML.with_name(file_name)
    specs = load_kernel_file(load_yaml_file(path), plugin="oracle-b12x", what=str(path))
    return {s.name: s for s in specs}


def rule_context(spec, mode, layer) -> dict:
    """The fields the engine evaluates a candidate's constraints on (oracle/engine.py `_try`)."""
    ctx = dict(layer.rule_fields())
    ctx.update(activation_format=mode.activation, mode=mode.name, backend=spec.backend, kernel=spec.name)
    return ctx


def yaml_reasons(spec, mode, layer) -> list[str]:
    from oracle.rules import failing

    ctx = rule_context(spec, mode, layer)
    return [r.render(ctx) for r in failing(spec.constraints, ctx)]


#: Conformance counts by suite (agree / intentional / unexplained), printed at the end of the run and
#: written as JSON to $ORACLE_CONFORMANCE_COUNTS when set (conftest.py).
CONFORMANCE_COUNTS: dict[str, dict] = {}
