"""A kernel's platform requirements (vendor, capability, packages, environment and runtime checks)
against one platform, as a verdict the engine caches per (kernel, platform).

Apart from the engine because it is the one place plugin check functions (`requires.environment`,
`requires.runtime`) are imported and called, and because its verdict depends on the platform only,
never on a layer.
"""
from __future__ import annotations

from typing import Any

from .catalog import REQUIREMENT_PLACEHOLDERS, KernelSpec, import_object, render_reason, version_satisfies
from .platform import Platform
from .trace import Candidate


class PlatformVerdict:
    """Whether a kernel may run on a platform, why not (reason, rule), and what its checks noted."""

    __slots__ = ("ok", "reason", "rule", "notes", "environment", "rejection")

    def __init__(self, ok: bool, reason: str = "", rule: str = "", notes: tuple[str, ...] = (),
                 environment: str = ""):
        self.ok, self.reason, self.rule, self.notes = ok, reason, rule, notes
        self.environment = environment      # what the kernel's environment check found (or why it failed)
        self.rejection: Candidate | None = None   # the traced candidate, built once (it never changes)


def check_requirements(spec: KernelSpec, platform: Platform, *, runtime: bool = True) -> PlatformVerdict:
    """The first unmet requirement (its reason and rule), else a pass with what the checks noted.

    `runtime=False` stops before the runtime check: what the environment checks found, without the
    device probes (which compile and run kernels: seconds each on a fresh machine)."""
    req = spec.requires
    facts = dict.fromkeys(REQUIREMENT_PLACEHOLDERS, "")
    facts.update(backend=spec.backend, kernel=spec.name, device_name=platform.device_name or platform.vendor,
                 vendor=platform.vendor, sm=platform.sm, capability=platform.capability_str)

    def fail(template: str | None, default: str, rule_key: str, **more: Any) -> PlatformVerdict:
        values = {**facts, **more}
        text = render_reason(template, values) if template else render_reason(default, values)
        return PlatformVerdict(False, text, spec.lines.get(rule_key, spec.source))

    if req.vendor is not None and platform.vendor not in req.vendor.any_of:
        return fail(req.vendor.reason, "{kernel} needs a {required} device; this is {device_name} ({vendor})",
                    "vendor", required=" or ".join(req.vendor.any_of))
    if req.capability is not None and not req.capability.accepts(platform.capability):
        return fail(req.capability.reason, "{kernel} needs compute capability {required}; {device_name} is {sm}",
                    "capability", required=req.capability.describe())
    for name, package in req.packages.items():
        installed = platform.package_version(name)
        install = package.install or f"pip install {name}"
        if installed is None:
            verdict = fail(None, "package {package} is not installed; install it with `{install}`",
                           f"package:{name}", package=name, install=install, installed="none",
                           required=package.version or "any version")
            if package.reason:
                values = {**facts, "package": name, "install": install, "installed": "none",
                          "required": package.version or "any version"}
                verdict.reason = f"{render_reason(package.reason, values)} " \
                                 f"(package {name} is not installed; `{install}`)"
            return verdict
        if not version_satisfies(installed, package.version):
            return fail(package.reason, "package {package} {installed} is installed but {required} is needed; "
                        "`{install}`", f"package:{name}", package=name, installed=installed,
                        required=package.version, install=install)
    notes: tuple[str, ...] = ()
    environment = ""
    if req.environment is not None:    # the check reads the platform's stated packages itself
        ok, detail = _call_check(req.environment.check, spec, platform, "environment check")
        environment = detail or ""
        if not ok:
            verdict = fail(req.environment.reason, "{kernel}'s environment check failed: {detail}", "environment",
                           detail=detail or "unsupported")
            verdict.environment = verdict.reason
            return verdict
        notes = (detail,) if detail else ()
    if req.runtime is not None and runtime:
        if platform.simulated:
            notes += (f"runtime check {req.runtime.check} assumed to pass: it cannot run on the simulated "
                     f"device {platform.device_name}",)
        else:
            ok, detail = _call_check(req.runtime.check, spec, platform, "runtime check")
            if not ok:
                return fail(req.runtime.reason, "{kernel}'s runtime check failed on {device_name}: {detail}",
                            "runtime", detail=detail or "unsupported")
    return PlatformVerdict(True, notes=notes, environment=environment)


def _call_check(check: str, spec: KernelSpec, platform: Platform, what: str) -> tuple[bool, str | None]:
    """A plugin's (ok, detail) check; whatever it raises becomes a failed verdict (the plugin is isolated)."""
    try:
        fn = import_object(check, f"kernel {spec.name} {what}")
        result = fn(spec, platform)
        return (result, None) if isinstance(result, bool) else result
    except Exception as exc:
        return False, f"{what} raised {type(exc).__name__}: {exc}"
