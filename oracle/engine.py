"""select_backend(): ordering x activation preference x constraints -> Decision.

For one layer: resolve the requested backend (KernelConfig > policy `backends` >
platform default > auto); expand the ordering's tiers into registered kernels; for
each kernel and each preferred activation format run (1) the platform requirements,
cached per platform, (2) the declarative constraints, (3) the plugin's optional
`can_implement` hook. The first candidate that passes wins; every verdict is traced.
Decisions are cached by (layer signature, platform, config, relevant env) within one
Engine (one registry and policy). A Decision names no layer, so the layers sharing a
signature share it safely. This module holds no process-wide state: `oracle.session`
builds engines and keeps them.
"""
from __future__ import annotations

import os
import threading
from dataclasses import replace
from typing import Any, Iterable, Iterator, Mapping

from .catalog import KernelSpec, Mode, normalize_backend
from .config import KernelConfig, pick
from .envvars import DISABLED_KERNELS, MEASUREMENTS, flag, kernel_list, reset_decision_env, set_decision_env
from .errors import InputError
from .formats import UNQUANTIZED_FORMATS
from .layer import not_a_layer
from .platform import Platform
from .policy import EffectivePolicy
from .ranking import order
from .registry import Registry, describe, short
from .requirements import PlatformVerdict, check_requirements
from .rules import failing
from .trace import Candidate, Decision, SelectedBy, log_decision
from .tuning.measurements import cached_measurements, env_paths
from .tuning.schema import layer_key
from .validation import require_type

_DEFAULT_CONFIG = KernelConfig()

_EMULATION_NOTE = "ends on a kernel meant for testing: {note}"


class Engine:
    """Selection bound to one registry and one effective policy, with its caches."""

    def __init__(self, registry: Registry, policy: EffectivePolicy):
        self.registry = registry
        self.policy = policy
        self.generation = registry.generation   # stale once plugins or kernels are added to the registry
        # decisions per (platform, config), then per (layer signature, env); the table of the last
        # (platform, config) is found by identity, so a model's layers hash neither again
        self._tables: dict[tuple[Platform, KernelConfig], dict[tuple, Decision]] = {}
        self._last: tuple[Any, Any, dict[tuple, Decision]] = (None, None, {})
        self._platform_checks: dict[tuple[str, Platform], PlatformVerdict] = {}
        self._environment_checks: dict[tuple[str, Platform], PlatformVerdict] = {}
        self._orderings: dict[tuple[str, str], tuple[list[KernelSpec], str]] = {}
        self._auto: dict[str, tuple[bool, str]] = {}
        self._auto_refusals: dict[str, Candidate | None] = {}
        self._disabled_by_env: dict[str | None, frozenset[str]] = {}
        self._preferences: dict[tuple[str, str], tuple[list[str], str]] = {}
        self._requests: dict[tuple, tuple[str, str]] = {}
        self._lock = threading.Lock()
        # os.environ.get decodes every value; the raw table of the process environment is read
        # directly (keys pre-encoded) so a cached decision costs a few dict lookups.
        raw = getattr(os.environ, "_data", None)
        encode = getattr(os.environ, "encodekey", None)
        self._raw_env = raw if isinstance(raw, dict) and encode is not None else None
        self._raw_keys = tuple(encode(k) for k in policy.env_keys) if self._raw_env is not None else ()

    # ---- public -------------------------------------------------------------------------
    def select(self, layer: Any, platform: Platform, config: KernelConfig,
               env: Mapping[str, str], measurements: Any = None) -> Decision:
        if env is os.environ and self._raw_env is not None:
            env_key = tuple(map(self._raw_env.get, self._raw_keys))
        else:
            env_key = tuple(env.get(k) for k in self.policy.env_keys)
        last_platform, last_config, table = self._last
        if platform is not last_platform or config is not last_config:
            table = self._table(platform, config)
        try:
            key = (layer.signature, env_key, measurements)
        except AttributeError:
            raise not_a_layer(layer) from None
        decision = table.get(key)
        if decision is None:
            token = set_decision_env(env)  # plugin hooks read the caller's env through decision_env()
            try:
                decision = self._decide(layer, platform, config, env, measurements)
            finally:
                reset_decision_env(token)
            with self._lock:
                if len(table) > 65536:
                    table.clear()
                table[key] = decision
            log_decision(decision, layer)
        return decision

    def _table(self, platform: Platform, config: KernelConfig) -> dict[tuple, Decision]:
        with self._lock:
            table = self._tables.get((platform, config))
            if table is None:
                if len(self._tables) > 256:
                    self._tables.clear()
                table = self._tables[(platform, config)] = {}
            self._last = (platform, config, table)
        return table

    # ---- the flow -------------------------------------------------------------------------
    def _decide(self, layer: Any, platform: Platform, config: KernelConfig,
                env: Mapping[str, str], measurements: Any = None) -> Decision:
        require_type(platform, Platform, "platform", "use Platform.preset('h200') or Platform.detect()")
        require_type(config, KernelConfig, "config", "use KernelConfig(moe_backend=...)")
        op, wf = layer.op, layer.weight_format
        base = {"op": op, "weight_format": wf, "platform": platform}
        if wf in UNQUANTIZED_FORMATS:
            return Decision(status="unquantized", **base)
        requested, req_source = self._requested_backend(op, wf, config, platform)
        base["requested_backend"] = requested
        acts, act_notes, act_rule = self._activations(layer, config, env)
        notes: list[str] = list(act_notes)
        candidates: list[Candidate] = []
        disabled = self._disabled(env)

        if requested != "auto":
            own = [k for k in self.registry.kernels if k.backend == requested and k.serves(op, wf)]
            if not own:
                notes.append(f"{op}_backend={requested} ({req_source}) has no kernel for {op} layers with {wf} "
                             "weights; this layer uses automatic selection")
            else:
                found = self._first(self._candidates(own, layer, platform, acts, act_rule, disabled, True),
                                    candidates)
                if found is not None:
                    notes.extend(_fallback_note(layer, found, candidates, acts, act_rule))
                    table, _ = self._measured(layer, platform, env, measurements)
                    if table is not None:  # an explicit request wins; its figures are still shown
                        candidates = [_with_timings(c, table) for c in candidates]
                    return self._selected(found, candidates, notes, base, "explicit")
                where = self.policy.where("on_unsupported")
                if self.policy.on_unsupported == "error":
                    notes.append(f"explicit {op}_backend={requested} ({req_source}) cannot serve this layer and "
                                 f"on_unsupported is error ({where})")
                    return Decision(status="no_kernel", candidates=tuple(candidates), notes=tuple(notes), **base)
                notes.append(f"explicit {op}_backend={requested} cannot serve this layer; falling back to "
                             f"automatic selection (on_unsupported: fallback at {where})")

        ordered, order_rule = self._ordered_kernels(op, wf)
        if not ordered:
            served = self.registry.kernels_for(op, wf)
            if served:
                notes.append(f"kernels for {op}/{wf} exist ({', '.join(k.name for k in served)}) but none is in "
                             f"a tier of the ordering ({order_rule}); they are reachable only explicitly")
            else:
                notes.append(f"no registered kernel implements {op} layers with {wf} weights")
            return Decision(status="no_kernel", candidates=tuple(candidates), notes=tuple(notes), **base)
        tried = self._candidates(ordered, layer, platform, acts, act_rule, disabled, False)
        table, mset = self._measured(layer, platform, env, measurements)
        if table is not None:  # step 4: every passing candidate, ranked by measured time
            return self._ranked(list(tried), table, mset, candidates, notes, base)
        found = self._first(tried, candidates)
        if found is not None:
            notes.extend(_fallback_note(layer, found, candidates, acts, act_rule))
            return self._selected(found, candidates, notes, base, "policy")
        return Decision(status="no_kernel", candidates=tuple(candidates), notes=tuple(notes), **base)

    @staticmethod
    def _first(tried: Iterable[tuple[Candidate, tuple[KernelSpec, Mode] | None]],
               trace: list[Candidate]) -> tuple[KernelSpec, Mode] | None:
        """Trace candidates up to the first that passes, and return it (None: none passes)."""
        for candidate, passing in tried:
            trace.append(candidate)
            if passing is not None:
                return passing
        return None

    def _ranked(self, tried: list[tuple[Candidate, tuple[KernelSpec, Mode] | None]], table: dict, mset: Any,
                trace: list[Candidate], notes: list[str], base: dict) -> Decision:
        """Every candidate tried; the passing ones in the order measurements give, each traced with why."""
        passing = [pair for _, pair in tried if pair is not None]
        if not passing:
            trace += [c for c, _ in tried]
            return Decision(status="no_kernel", candidates=tuple(trace), notes=tuple(notes), **base)
        ranked = order(passing, table, mset)
        index = -1
        for candidate, pair in tried:
            candidate = _with_timings(candidate, table)
            if pair is not None:
                index += 1
                if not ranked.by_measurement:
                    if index > ranked.winner:
                        break   # nothing measured: the trace is the static one, up to the policy's pick
                elif index == ranked.winner:
                    reason, rule = ranked.verdicts[index]
                    candidate = replace(candidate, reason=reason, rule=rule)
                else:
                    reason, rule = ranked.verdicts[index]
                    candidate = replace(candidate, verdict="rejected", stage="measurement", reason=reason,
                                        rule=rule, reasons=(reason,), rules=(rule,))
            trace.append(candidate)
        if ranked.note:
            notes = [*notes, ranked.note]
        return self._selected(passing[ranked.winner], trace, notes, base,
                              "measured" if ranked.by_measurement else "policy")

    def _measured(self, layer: Any, platform: Platform, env: Mapping[str, str],
                  explicit: Any) -> tuple[dict | None, Any]:
        """This layer's figures from the measurement set in force (argument > env > policy), if any."""
        mset = explicit
        if mset is None:
            raw = env.get(MEASUREMENTS)
            if not raw and not self.policy.measurements.files:
                return None, None     # the static path: no tuning files anywhere
            paths = env_paths(raw) or tuple(self.policy.measurements.files)
            if not paths:
                return None, None
            conf = self.policy.measurements
            mset = cached_measurements(paths, conf.objective, conf.allow_testing_only)
        table = mset.table(platform, self.registry).for_layer(layer_key(layer))
        return table, mset

    def viable(self, layer: Any, platform: Platform, config: KernelConfig | None = None,
               env: Mapping[str, str] | None = None) -> list[tuple[KernelSpec, Mode]]:
        """Every (kernel, mode) of every plugin and tier that passes its requirements and constraints
        for `layer` on `platform`, at the activation formats selection would try (what `oracle tune` times)."""
        env = os.environ if env is None else env
        acts, _, act_rule = self._activations(layer, config or _DEFAULT_CONFIG, env)
        kernels = self.registry.kernels_for(layer.op, layer.weight_format)
        token = set_decision_env(env)
        try:
            return [pair for _, pair in self._candidates(kernels, layer, platform, acts, act_rule,
                                                         self._disabled(env), True) if pair is not None]
        finally:
            reset_decision_env(token)

    def _selected(self, found: tuple[KernelSpec, Mode], candidates: list[Candidate], notes: list[str],
                  base: dict, selected_by: SelectedBy) -> Decision:
        spec, mode = found
        if spec.testing_only:
            notes.append(_EMULATION_NOTE.format(note=spec.note or f"{spec.name} is the slow path meant for testing"))
        if isinstance(mode.params.get("note"), str):  # what the mode runs, e.g. per call size (decode/prefill)
            notes.append(f"{spec.name} {mode.name}: {mode.params['note']}")
        return Decision(status="selected", backend=spec.backend, kernel=spec.name, mode=mode.name,
                        activation_format=mode.activation, candidates=tuple(candidates), notes=tuple(notes),
                        spec=spec, mode_spec=mode, selected_by=selected_by, **base)

    def _candidates(self, kernels: Iterable[KernelSpec], layer: Any, platform: Platform, acts: list[str],
                    act_rule: str, disabled: frozenset[str],
                    explicit: bool) -> Iterator[tuple[Candidate, tuple[KernelSpec, Mode] | None]]:
        """Each (kernel, mode) in order, as its traced candidate and, when it passes, the pair."""
        fields = layer.rule_fields()
        wf = layer.weight_format
        for spec in kernels:
            if spec.name in disabled:
                yield self._reject(spec, None, "policy", f"{spec.name} is disabled",
                                   self.policy.where("disabled_kernels")), None
                continue
            if not explicit:
                refusal = self._auto_refusal(spec)
                if refusal is not None:
                    yield refusal, None
                    continue
            verdict = self._platform_check(spec, platform)
            if not verdict.ok:  # platform and policy verdicts concern the whole kernel, not one mode
                if verdict.rejection is None:
                    verdict.rejection = self._reject(spec, None, "platform", verdict.reason, verdict.rule)
                yield verdict.rejection, None
                continue
            modes = spec.modes_for(wf)
            usable = [(a, m) for a in acts for m in modes if m.activation == a]
            if not usable:
                served = ", ".join(sorted({m.activation for m in modes}))
                yield self._reject(spec, acts[0] if acts else None, "policy",
                                   f"no mode for activations {'/'.join(acts)} (serves {served})", act_rule), None
                continue
            for act, mode in usable:
                ctx = dict(fields)
                ctx.update(activation_format=act, mode=mode.name, backend=spec.backend, kernel=spec.name)
                declared = declared_block_problem(mode, ctx)
                if declared is not None:   # the mode's own declaration, before its constraints
                    yield Candidate(spec.backend, spec.name, mode.name, act, "rejected", "constraint", declared,
                                    spec.source), None
                    continue
                broken = failing(spec.constraints, ctx)
                if broken:
                    reasons = tuple(r.render(ctx) for r in broken)
                    yield Candidate(spec.backend, spec.name, mode.name, act, "rejected", "constraint", reasons[0],
                                    broken[0].source, reasons, tuple(r.source for r in broken)), None
                    continue
                hook_reason = self._hook(spec, layer, mode, platform)
                if hook_reason is not None:
                    yield Candidate(spec.backend, spec.name, mode.name, act, "rejected", "constraint", hook_reason,
                                    f"{spec.plugin}: can_implement"), None
                    continue
                reason = spec.note or "passes every requirement and constraint"
                if verdict.notes:
                    reason = f"{reason}; " + "; ".join(verdict.notes)
                yield Candidate(spec.backend, spec.name, mode.name, act, "selected", None, reason,
                                spec.source), (spec, mode)

    # ---- pieces ---------------------------------------------------------------------------
    @staticmethod
    def _reject(spec: KernelSpec, act: str | None, stage: str, reason: str, rule: str) -> Candidate:
        """A whole kernel rejected (policy or platform: no mode is named)."""
        return Candidate(spec.backend, spec.name, None, act, "rejected", stage,  # type: ignore[arg-type]
                         reason, rule, (reason,), (rule,))

    def _auto_refusal(self, spec: KernelSpec) -> Candidate | None:
        """The traced rejection of a kernel automatic selection may not pick (built once per kernel)."""
        found = self._auto_refusals.get(spec.name, False)
        if found is False:
            allowed, rule = self._auto_allowed(spec)
            found = None if allowed else self._reject(
                spec, None, "policy", f"{spec.backend} {spec.op} kernels are not auto-selected; request "
                f"them explicitly (--{spec.op}-backend {spec.backend})", rule)
            self._auto_refusals[spec.name] = found
        return found

    def _auto_allowed(self, spec: KernelSpec) -> tuple[bool, str]:
        """May automatic selection pick `spec` (policy over the kernel's own flag), and the rule that says so."""
        found = self._auto.get(spec.name)
        if found is None:
            value, rule = self.policy.auto_select_for(spec.backend, spec.op)
            found = (spec.auto_select, spec.lines.get("auto_select", spec.source)) if value is None else (value, rule)
            self._auto[spec.name] = found
        return found

    def _hook(self, spec: KernelSpec, layer: Any, mode: Mode, platform: Platform) -> str | None:
        """The declaring plugin's `can_implement` verdict (through pluggy's caller): None accepts."""
        hook = self.registry.can_implement_caller(spec.name)
        if hook is None:
            return None
        try:
            result = hook(kernel=spec, layer=layer, mode=mode, platform=platform)
        except (Exception, SystemExit) as exc:  # the plugin's failure rejects this candidate only
            return f"plugin {spec.plugin} can_implement raised {describe(exc)}"
        if result is None or result is True:
            return None
        if result is False:
            return f"plugin {spec.plugin} can_implement rejected the layer"
        if isinstance(result, str):
            return result
        return (f"plugin {spec.plugin} can_implement returned {short(result)}; expected None (accept), "
                "True/False or a reason string")

    def _disabled(self, env: Mapping[str, str]) -> frozenset[str]:
        """Disabled kernel names: the policy's plus ORACLE_DISABLED_KERNELS (cached per value; an
        unknown name warns once per value and disables nothing)."""
        extra = env.get(DISABLED_KERNELS)
        names = self._disabled_by_env.get(extra)
        if names is None:
            found = set(self.policy.disabled_kernels)
            found.update(kernel_list(env, DISABLED_KERNELS, self.registry.by_name))
            names = self._disabled_by_env[extra] = frozenset(found)
        return names

    def _ordered_kernels(self, op: str, wf: str) -> tuple[list[KernelSpec], str]:
        found = self._orderings.get((op, wf))
        if found is None:
            found = self._orderings[(op, wf)] = self._expand_ordering(op, wf)
        return found

    def _expand_ordering(self, op: str, wf: str) -> tuple[list[KernelSpec], str]:
        tiers, rule = self.policy.ordering_for(op, wf)
        seen: set[str] = set()
        out: list[KernelSpec] = []
        for tier in tiers:
            for spec in self.registry.kernels:
                if spec.name not in seen and (spec.tier == tier or spec.backend == tier) and spec.serves(op, wf):
                    seen.add(spec.name)
                    out.append(spec)
        return out, rule

    def _requested_backend(self, op: str, wf: str, config: KernelConfig,
                           platform: Platform) -> tuple[str, str]:
        key = (op, wf, config, platform)
        found = self._requests.get(key)
        if found is None:
            found = self._requests[key] = self._resolve_request(op, wf, config, platform)
        return found

    def _resolve_request(self, op: str, wf: str, config: KernelConfig,
                         platform: Platform) -> tuple[str, str]:
        """Explicit user choice > deployment default > platform default > auto."""
        chosen = config.backend_for(op, wf)
        source = "KernelConfig"
        if chosen == "auto":
            chosen = normalize_backend(pick(self.policy.backends.get(op, "auto"), wf) or "auto")
            source = f"policy backends at {self.policy.where('backends', op)}"
        if chosen == "auto":
            for i, entry in enumerate(self.policy.platforms):
                if entry.matches(platform):
                    value = pick(entry.backends.get(op), wf)
                    if value:
                        chosen = normalize_backend(value)
                        source = f"platform default at {self.policy.where('platforms', str(i))}"
                    break
        self.registry.require_backend(chosen, field=f"{op}_backend",
                                      source=None if source == "KernelConfig" else source)
        return chosen, source

    def _activations(self, layer: Any, config: KernelConfig,
                     env: Mapping[str, str]) -> tuple[list[str], list[str], str]:
        op, wf = layer.op, layer.weight_format
        declared = getattr(layer, "activation_format", None)
        requested = config.activation_for(op, wf) if op != "embedding" else None
        notes: list[str] = []
        prefs, rule = self._preferences.get((op, wf)) or self._preference(op, wf)
        if requested is not None:
            if declared is not None and declared != requested:
                raise InputError(f"requested {op}_activation={requested} contradicts the checkpoint, which "
                                 f"declares {declared} activations for {wf} weights",
                                 field=f"{op}_activation", source=getattr(layer, "name", None) or None)
            acts = [requested]
        elif declared is not None:
            fallback, fallback_rule = self.policy.checkpoint_fallback_for(op, wf)
            acts = [declared] + [a for a in fallback if a != declared]
            if len(acts) > 1:
                rule = fallback_rule
        else:
            acts = [p for p in prefs if p != "checkpoint"]
        force = self.policy.force_bf16_activations
        if op in force.ops and wf in force.formats:
            switch = next((k for k in force.env if flag(env, k)), None)
            if switch is not None and acts != ["bf16"]:
                notes.append(f"{switch}=1 forces BF16 activations for {wf} {op} layers "
                             f"({self.policy.where('force_bf16_activations', 'env')})")
                acts = ["bf16"]
        return acts, notes, rule

    def _preference(self, op: str, wf: str) -> tuple[list[str], str]:
        found = self._preferences[(op, wf)] = self.policy.activations_for(op, wf)
        return found

    def environment(self, platform: Platform) -> list[str]:
        """What the kernels' environment checks found on this platform (e.g. which b12x runs), once each.

        Only the environment checks run here, never a runtime probe: a kernel no layer asks for is not
        compiled and run on the device just to be listed (on a fresh machine the probes of every kernel
        took 13-14 s of a load; the selection still probes each kernel it considers)."""
        found = (self._environment_check(spec, platform).environment for spec in self.registry.kernels)
        return list(dict.fromkeys(text for text in found if text))

    def _environment_check(self, spec: KernelSpec, platform: Platform) -> PlatformVerdict:
        key = (spec.name, platform)
        verdict = self._platform_checks.get(key) or self._environment_checks.get(key)
        if verdict is None:
            verdict = self._environment_checks[key] = check_requirements(spec, platform, runtime=False)
        return verdict

    def _platform_check(self, spec: KernelSpec, platform: Platform) -> PlatformVerdict:
        key = (spec.name, platform)
        verdict = self._platform_checks.get(key)
        if verdict is None:
            verdict = check_requirements(spec, platform)
            self._platform_checks[key] = verdict
        return verdict


def _with_timings(candidate: Candidate, table: dict) -> Candidate:
    """The candidate with the figures `table` holds for it, if any."""
    found = table.get((candidate.kernel, candidate.mode, candidate.activation_format))
    return replace(candidate, timings=found.timings()) if found is not None and found.times else candidate


def _fallback_note(layer: Any, found: tuple[KernelSpec, Mode], candidates: list[Candidate], acts: list[str],
                   rule: str) -> list[str]:
    """Why a kernel serves other activations than the checkpoint declares (policy checkpoint_fallback)."""
    declared = getattr(layer, "activation_format", None)
    spec, mode = found
    if declared is None or mode.activation == declared or not acts or acts[0] != declared:
        return []       # served as declared, or forced (FORCE_A16 says so itself)
    refused = [c for c in candidates if c.activation_format == declared and c.verdict == "rejected"]
    own = next((c for c in refused if c.kernel == spec.name), refused[0] if refused else None)
    why = f"{own.kernel} {own.mode or ''}: {own.reason}".replace(" :", ":") if own else "no candidate serves it"
    return [f"the checkpoint declares {declared} activations, which cannot be served here ({why}); "
            f"{spec.name} runs {mode.activation} activations instead (checkpoint_fallback at {rule})"]


def declared_block_problem(mode: Mode, fields: Mapping[str, Any]) -> str | None:
    """A mode that declares `weight_block: [rows, cols]` reads scales of exactly those blocks: a layer whose
    checkpoint blocks differ (a [64, 128] weight_block_size) cannot be served by it."""
    declared = mode.params.get("weight_block")
    rows, cols = fields.get("weight_block_rows"), fields.get("weight_block_cols")
    if declared is None or rows is None or list(declared) == [rows, cols]:
        return None
    return (f"mode {mode.name} reads {declared[0]}x{declared[1]} weight blocks (its declared weight_block); "
            f"the checkpoint's blocks are {rows}x{cols}")
