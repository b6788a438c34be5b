"""The constraint language: structured predicates over named layer fields, no eval.

A rule, as written in YAML::

    - reason: "MXFP4 W4A8 requires hidden size divisible by 256"
      when: {all: [{field: weight_format, equals: mxfp4}, {field: activation_format, equals: mxfp8}]}
      require: {field: hidden_size, divisible_by: 256}

Predicates: `{field: F, <op>: value, ...}` with ops `equals`, `in`, `not_in`,
`divisible_by`, `range` (`min`, `max`, `min_exclusive`, `max_exclusive`), `present`
(true/false: whether an optional value such as `activation_params.limit` is given); several ops
in one predicate must all hold. Combinators: `all`, `any`, `not`. A rule passes when
its `when` is false or its `require` is true. Reasons may interpolate fields (`{dtype}`).
Unknown fields, operators or placeholders are load-time errors that name file and line.
Rules compile to closures once, so evaluation costs a few attribute reads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from . import templates
from .errors import PolicyError
from .formats import ACTIVATION_FORMATS, ACTIVATION_SCALES, DTYPES, MOE_ACTIVATIONS, OPS, WEIGHT_FORMATS
from .sources import where

Predicate = Callable[[Mapping[str, Any]], bool]

_COMMON = {
    "op": OPS, "weight_format": WEIGHT_FORMATS, "activation_format": ACTIVATION_FORMATS,
    "checkpoint_activation_format": ACTIVATION_FORMATS, "dtype": DTYPES, "mode": str,
    "tp_size": int, "backend": str, "kernel": str,
}
#: FP8 activation-scale kind ("unknown" when the checkpoint does not say) and the 2-D weight block.
_SCALES = {"activation_scale": (*ACTIVATION_SCALES, "unknown"), "weight_block_rows": int, "weight_block_cols": int}

#: Field name -> allowed values (a tuple of strings) or a Python type, per op.
FIELDS: dict[str, dict[str, Any]] = {
    "linear": {**_COMMON, "in_features": int, "out_features": int, "K": int, "N": int,
               "has_bias": bool, "group_size": int, **_SCALES},
    "moe": {**_COMMON, "num_experts": int, "top_k": int, "hidden_size": int,
            "intermediate_size": int, "intermediate_size_per_rank": int,
            "experts_per_rank": int, "expert_parallel": bool, "activation": MOE_ACTIVATIONS,
            "has_bias": bool, "ep_size": int, "use_all2all": bool, "eplb": bool,
            "expert_map": bool, "lora": bool, "apply_router_weight_on_input": bool,
            "group_size": int, **_SCALES},
    "embedding": {**_COMMON, "num_embeddings": int, "embedding_dim": int},
}
#: Prefix of open-ended numeric fields (`activation_params.beta`, `activation_params.limit`).
PARAM_PREFIX = "activation_params."
_OPERATORS = ("equals", "in", "not_in", "divisible_by", "range", "present")
_RANGE_KEYS = ("min", "max", "min_exclusive", "max_exclusive")


@dataclass(frozen=True)
class Rule:
    """One constraint with its human reason and the file:line it was declared at."""

    reason: str
    source: str
    require: Predicate = field(repr=False, compare=False)
    when: Predicate | None = field(default=None, repr=False, compare=False)
    id: str | None = None
    fields: tuple[str, ...] = ()

    def check(self, ctx: Mapping[str, Any]) -> bool:
        if self.when is not None and not self.when(ctx):
            return True
        return self.require(ctx)

    def render(self, ctx: Mapping[str, Any]) -> str:
        """The reason with its fields filled in (checked at load; an unset value shows as {name})."""
        def lookup(name: str) -> Any:
            value = field_value(ctx, name)
            if value is None:
                raise KeyError(name)
            return value
        return templates.render(self.reason, lookup)


def field_value(ctx: Mapping[str, Any], name: str) -> Any:
    if name.startswith(PARAM_PREFIX):
        return (ctx.get("activation_params") or {}).get(name[len(PARAM_PREFIX):])
    return ctx.get(name)


def compile_rules(raw: Any, op: str, owner: str, loc: str | None = None) -> tuple[Rule, ...]:
    """Compile a YAML list of rules for kernels of `op`; `owner` names them in errors, `loc` is
    the file:line of the `constraints` key (for a value that is not a list and so has no line)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PolicyError(f"{owner}: constraints must be a list of rules", source=where(raw, default=loc or "<memory>"))
    return tuple(_compile_rule(item, op, owner, where(raw, i)) for i, item in enumerate(raw))


def _compile_rule(raw: Any, op: str, owner: str, loc: str) -> Rule:
    if not isinstance(raw, dict):
        raise PolicyError(f"{owner}: a rule must be a mapping with 'reason' and 'require'", source=loc)
    unknown = set(raw) - {"reason", "require", "when", "id"}
    if unknown:
        raise PolicyError(f"{owner}: unknown rule key(s) {sorted(unknown, key=str)}; "
                          "expected reason, require, when, id",
                          source=loc)
    reason = raw.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise PolicyError(f"{owner}: every rule needs a non-empty 'reason' string", source=loc)
    if "require" not in raw:
        raise PolicyError(f"{owner}: rule {reason!r} has no 'require' predicate", source=loc)
    _check_reason(reason, op, owner, loc)
    used: set[str] = set()
    require = _compile(raw["require"], op, owner, where(raw, "require"), used)
    when = _compile(raw["when"], op, owner, where(raw, "when"), used) if "when" in raw else None
    rid = raw.get("id")
    return Rule(reason=reason, source=loc, require=require, when=when,
                id=str(rid) if rid is not None else None, fields=tuple(sorted(used)))


#: A value of each kind, to try a reason's format specs on at load time.
_SAMPLES = {int: 1, float: 1.0, bool: True, str: "x"}


def _check_reason(reason: str, op: str, owner: str, loc: str) -> None:
    """The reason must be a template over this op's fields (see oracle.templates)."""
    fields = FIELDS[op]

    def sample(name: str) -> Any:
        if name.startswith(PARAM_PREFIX) and op == "moe" and name[len(PARAM_PREFIX):].isidentifier():
            return 1.0
        kind = fields[name]
        return kind[0] if isinstance(kind, tuple) else _SAMPLES[kind]
    known = ", ".join(sorted(fields)) + (", activation_params.<name>" if op == "moe" else "")
    try:
        templates.check(reason, sample, lambda name: f"reason interpolates unknown field {{{name}}} for {op} "
                                                     f"layers; known: {known}")
    except ValueError as exc:
        raise PolicyError(f"{owner}: {exc}", source=loc) from None


def _compile(raw: Any, op: str, owner: str, loc: str, used: set[str]) -> Predicate:
    if not isinstance(raw, dict) or not raw:
        raise PolicyError(f"{owner}: a predicate must be a mapping such as "
                          "{field: hidden_size, divisible_by: 256}", source=loc)
    loc = where(raw, default=loc)
    keys = set(raw)
    for combinator in ("all", "any"):
        if combinator in raw:
            if keys != {combinator} or not isinstance(raw[combinator], list) or not raw[combinator]:
                raise PolicyError(f"{owner}: '{combinator}' takes a non-empty list of predicates and "
                                  "nothing beside it", source=loc)
            parts = tuple(_compile(p, op, owner, where(raw[combinator], i, loc), used)
                          for i, p in enumerate(raw[combinator]))
            if combinator == "all":
                return lambda ctx: all(p(ctx) for p in parts)
            return lambda ctx: any(p(ctx) for p in parts)
    if "not" in raw:
        if keys != {"not"}:
            raise PolicyError(f"{owner}: 'not' takes one predicate and nothing beside it", source=loc)
        inner = _compile(raw["not"], op, owner, loc, used)
        return lambda ctx: not inner(ctx)
    if "field" not in raw:
        raise PolicyError(f"{owner}: unknown predicate {sorted(keys, key=str)}; expected 'field' with one of "
                          f"{', '.join(_OPERATORS)}, or all/any/not", source=loc)
    name = raw["field"]
    kind = _field_kind(name, op, owner, loc)
    used.add(name)
    ops = [k for k in raw if k != "field"]
    if not ops:
        raise PolicyError(f"{owner}: predicate on {name!r} has no operator; expected one of "
                          f"{', '.join(_OPERATORS)}", source=loc)
    checks = [_operator(name, kind, o, raw[o], owner, where(raw, o, loc)) for o in ops]
    if name.startswith(PARAM_PREFIX):
        param = name[len(PARAM_PREFIX):]

        def get(ctx: Mapping[str, Any]) -> Any:
            return (ctx.get("activation_params") or {}).get(param)
    else:
        def get(ctx: Mapping[str, Any]) -> Any:
            return ctx.get(name)
    if len(checks) == 1:
        check = checks[0]
        return lambda ctx: check(get(ctx))
    return lambda ctx: all(c(get(ctx)) for c in checks)


def _field_kind(name: Any, op: str, owner: str, loc: str) -> Any:
    if not isinstance(name, str):
        raise PolicyError(f"{owner}: 'field' must be a field name string", source=loc)
    if name.startswith(PARAM_PREFIX) and op == "moe" and len(name) > len(PARAM_PREFIX):
        return float
    kind = FIELDS[op].get(name)
    if kind is None:
        raise PolicyError(f"{owner}: unknown field {name!r} for {op} layers; known fields: "
                          f"{', '.join(sorted(FIELDS[op]))}" + (", activation_params.<name>" if op == "moe" else ""),
                          source=loc)
    return kind


def _check_value(name: str, kind: Any, value: Any, owner: str, loc: str) -> Any:
    if isinstance(kind, tuple):
        if value is not None and value not in kind:
            raise PolicyError(f"{owner}: {value!r} is not a valid value of {name}; expected one of "
                              f"{', '.join(kind)}", source=loc)
    elif kind is bool:
        if not isinstance(value, bool):
            raise PolicyError(f"{owner}: {name} is true/false, got {value!r}", source=loc)
    elif kind in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PolicyError(f"{owner}: {name} is a number, got {value!r}", source=loc)
    return value


def _operator(name: str, kind: Any, op: str, arg: Any, owner: str, loc: str) -> Callable[[Any], bool]:
    if op == "present":
        if not isinstance(arg, bool):
            raise PolicyError(f"{owner}: 'present' on {name} takes true or false", source=loc)
        return (lambda v: v is not None) if arg else (lambda v: v is None)
    if op == "equals":
        expected = _check_value(name, kind, arg, owner, loc)
        if isinstance(expected, bool):
            return lambda v: v is expected
        return lambda v: v == expected and not isinstance(v, bool)
    if op in ("in", "not_in"):
        if not isinstance(arg, list) or not arg:
            raise PolicyError(f"{owner}: '{op}' on {name} takes a non-empty list", source=loc)
        allowed = frozenset(_check_value(name, kind, a, owner, loc) for a in arg)
        return (lambda v: v in allowed) if op == "in" else (lambda v: v not in allowed)
    if op == "divisible_by":
        if kind is not int or isinstance(arg, bool) or not isinstance(arg, int) or arg <= 0:
            raise PolicyError(f"{owner}: 'divisible_by' needs an integer field and a positive integer "
                              f"(got {name} / {arg!r})", source=loc)
        return lambda v: isinstance(v, int) and v % arg == 0
    if op == "range":
        if kind not in (int, float) or not isinstance(arg, dict) or not arg or set(arg) - set(_RANGE_KEYS):
            raise PolicyError(f"{owner}: 'range' needs a numeric field and a mapping of "
                              f"{', '.join(_RANGE_KEYS)}", source=loc)
        bounds = {k: _check_value(name, float, v, owner, loc) for k, v in arg.items()}
        lo, hi = bounds.get("min"), bounds.get("max")
        lox, hix = bounds.get("min_exclusive"), bounds.get("max_exclusive")

        def in_range(v: Any) -> bool:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
                return False
            return ((lo is None or v >= lo) and (hi is None or v <= hi)
                    and (lox is None or v > lox) and (hix is None or v < hix))
        return in_range
    raise PolicyError(f"{owner}: unknown operator {op!r} on {name}; expected one of "
                      f"{', '.join(_OPERATORS)}", source=loc)


def failing(rules: tuple[Rule, ...], ctx: Mapping[str, Any]) -> list[Rule]:
    """The rules `ctx` breaks, in declaration order."""
    return [r for r in rules if not r.check(ctx)]
