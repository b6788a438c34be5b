"""Per-layer wrappers of vLLM's quant methods: record every layer; in enforce, run the oracle's kernel.

A wrapper is a subclass of the method's own class, built on the fly with the same name
(vLLM's weight loader tests for "compressed"/"ModelOpt" in it; CPython refuses to swap
`__class__` on these classes) and given the original instance's state. It:

* after `create_weights` (parameters exist, shapes known) maps the layer to an oracle
  `LinearLayer`/`MoELayer` and asks the oracle; shadow writes the record now;
* in enforce, after vLLM loaded the parameters, converts them through oracle.checkpoints
  into the chosen kernel's `process_weights`, releases vLLM's copies, and from then on
  `apply` calls the opaque custom op (`torch.ops.oracle.linear/moe`); a layer the oracle
  cannot serve or convert keeps vLLM's kernel, or stops the engine with one line, per
  `on_unconvertible`; the record (written after loading) says which.
"""
from __future__ import annotations

from typing import Any

import torch

from oracle.integration import convert, records as rec
from oracle.integration.layers import linear_layer, moe_layer, torch_dtype_name

from . import mapping
from .runtime import ENGINE, Run

DIALECT = "compressed-tensors"
_subclasses: dict[tuple[type, type], type] = {}


class LayerError(RuntimeError):
    """A layer no kernel can run in this mode: vLLM has none (shadow, or enforce without the oracle's), or
    enforce cannot serve it and on_unconvertible is error. One line, naming the layer."""


def wrap(method: Any, mixin: type, state: "LayerState") -> Any:
    """A copy of `method` whose class is `mixin` over the method's class, under the same name."""
    base = type(method)
    cls = _subclasses.get((base, mixin))
    if cls is None:
        cls = type(base.__name__, (mixin, base), {"__qualname__": base.__qualname__, "__module__": base.__module__})
        _subclasses[(base, mixin)] = cls
    new = cls.__new__(cls)
    new.__dict__.update(method.__dict__)
    new._oracle = state
    return new


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class LayerState:
    """One layer's oracle view: the layer spec, the decision, vLLM's choice, and the kernel if taken."""

    def __init__(self, run: Run, op: str, name: str):
        self.run, self.op, self.name = run, op, name
        self.layer: Any = None
        self.decision: Any = None
        self.engine_kernel: str | None = None
        self.engine_backend: str | None = None
        self.engine_error: str | None = None      # vLLM's own selection failed (enforce went on)
        self.unmapped: str | None = None         # the layer has no oracle description
        self.kernel: Any = None
        self.handle: int | None = None
        self.note = ""
        self.rows: list[int] = []                # linear: rows of each fused part (q, k, v)
        self.capture: Any = None                 # MoE: what vLLM's backend selector was told

    # ---- deciding ----------------------------------------------------------------------
    def decide(self, build: Any) -> None:
        try:
            self.layer = build()
        except Exception as exc:              # a layer the oracle cannot describe stays vLLM's
            self.unmapped = _one_line(exc)
            return
        self.decision = self.run.decide(self.layer)

    @property
    def serving(self) -> bool:
        return self.handle is not None

    def wants(self) -> bool:
        return (self.run.takes(self.op) and self.decision is not None and self.decision.status == "selected")

    # ---- records ------------------------------------------------------------------------
    def emit(self) -> None:
        if self.layer is None:
            self.run.emit({rec.MARK: "layer", "engine": ENGINE, "mode": self.run.mode, "name": self.name,
                           "op": self.op, "engine_kernel": self.engine_kernel, "agree": "unmapped",
                           "runs": "engine", "note": f"no oracle description: {self.unmapped}",
                           "oracle": {"status": "unmapped", "kernel": None, "mode": None}, "rejected": [],
                           "layer": {}})
            return
        note = "; ".join(p for p in (self.note, self.engine_error and f"vLLM: {self.engine_error}") if p)
        self.run.emit(rec.layer_record(engine=ENGINE, mode=self.run.mode, layer=self.layer, decision=self.decision,
                                       engine_kernel=self.engine_kernel, engine_backend=self.engine_backend,
                                       runs="oracle" if self.serving else "engine", note=note))

    # ---- enforce -------------------------------------------------------------------------
    def tolerates(self) -> bool:
        """Whether vLLM's failure to choose a kernel is recorded instead of raised at construction:
        in enforce (the oracle may serve the layer) and in shadow (so the report covers every layer;
        the failure is raised when vLLM would first need the kernel, after loading)."""
        return self.run.mode == "shadow" or self.run.takes(self.op)

    def take_over(self, module: torch.nn.Module, arguments: Any) -> bool:
        """Convert and install the oracle kernel; False (with a note) when vLLM keeps the layer."""
        if self.run.mode == "shadow" and self.engine_error:
            raise LayerError(f"{self.name}: vLLM has no kernel for this layer ({self.engine_error}); shadow "
                               "mode leaves vLLM's choices as they are")
        if not self.wants():
            if self.run.mode == "enforce":
                reason = self._why_not()
                if self.engine_error:
                    raise LayerError(f"{self.name}: vLLM has no kernel ({self.engine_error}) and the oracle "
                                     f"does not serve it: {reason}")
                if self.op in self.run.config.ops and self.run.config.on_unconvertible == "error":
                    raise LayerError(f"{self.name}: {reason} (on_unconvertible: error)")
                self.note = f"{reason}; vLLM's kernel kept"
            return False
        try:
            args, consumed = arguments()
            kernel = self.decision.instantiate(self.layer)
            kernel.process_weights(**args)
        except Exception as exc:
            reason = f"cannot convert vLLM's parameters for {self.decision.kernel}: {_one_line(exc)}"
            if self.run.config.on_unconvertible == "error" or self.engine_error:
                raise LayerError(f"{self.name}: {reason}" + (f"; vLLM has no kernel either ({self.engine_error})"
                                                               if self.engine_error else "")) from None
            self.note = f"{reason}; vLLM's kernel kept (on_unconvertible: keep_vllm)"
            return False
        from oracle.integration import ops
        self.kernel = kernel
        module._oracle_kernel = kernel           # the op registry holds kernels weakly: the module owns it
        self.handle = ops.register(kernel)
        for name in consumed:                    # vLLM's copies: the kernel holds its own
            old = getattr(module, name)
            module.register_parameter(name, torch.nn.Parameter(old.data.new_empty(0), requires_grad=False))
        return True

    def _why_not(self) -> str:
        if self.layer is None:
            return f"no oracle description ({self.unmapped})"
        if self.op not in self.run.config.ops:
            return f"{self.op} is not in ops {self.run.config.ops}"
        return f"the oracle has no kernel ({self.decision.status})"


def _vllm_kernel_of(owner: Any) -> Any:
    """vLLM's linear kernel object kept by a scheme (fp8_linear, kernel, ...), found by type."""
    from vllm.model_executor.kernels.linear.base import MMLinearKernel
    from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import MPLinearKernel
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import ScaledMMLinearKernel
    for value in vars(owner).values():
        if isinstance(value, (MMLinearKernel, MPLinearKernel, ScaledMMLinearKernel)):
            return value
    return None


def _params(module: torch.nn.Module, prefix: str = "") -> dict[str, Any]:
    return {n: p for n, p in module.named_parameters(recurse=False) if n.startswith(prefix) and n != "bias"}


# ================================================================ linear
class _OracleMethod:
    """What the linear and MoE mixins share: after vLLM loaded the parameters, take the layer over
    (enforce) or leave it to vLLM's own post-processing; in enforce the record is written then."""

    _oracle: LayerState

    def _oracle_arguments(self, layer: torch.nn.Module) -> tuple[dict[str, Any], list[str]]:
        raise NotImplementedError

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        st = self._oracle
        if not st.take_over(layer, lambda: self._oracle_arguments(layer)):
            super().process_weights_after_loading(layer)  # type: ignore[misc]
        if st.run.mode == "enforce":
            st.emit()


class OracleLinearMethod(_OracleMethod):
    """Mixin over vLLM's linear quant method (compressed-tensors: CompressedTensorsLinearMethod)."""

    def create_weights(self, layer: torch.nn.Module, input_size_per_partition: int,
                       output_partition_sizes: list[int], input_size: int, output_size: int,
                       params_dtype: torch.dtype, **extra: Any) -> None:
        st = self._oracle
        try:
            super().create_weights(layer, input_size_per_partition, output_partition_sizes,  # type: ignore[misc]
                                   input_size, output_size, params_dtype, **extra)
        except Exception as exc:
            if not st.tolerates():
                raise
            st.engine_error = _one_line(exc)
        scheme = getattr(layer, "scheme", None)
        kernel = _vllm_kernel_of(scheme) if scheme is not None else None
        st.engine_kernel = type(kernel).__name__ if kernel is not None else None
        st.engine_backend = mapping.linear_backend_of(type(kernel)) if kernel is not None else None
        st.decide(lambda: _linear_spec(layer, scheme, input_size_per_partition, output_partition_sizes,
                                       params_dtype))
        st.rows = list(output_partition_sizes)
        if st.run.mode == "shadow":
            st.emit()

    def _oracle_arguments(self, layer: torch.nn.Module) -> tuple[dict[str, Any], list[str]]:
        return _linear_arguments(layer, self._oracle)

    def apply(self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        handle = self._oracle.handle
        if handle is None:
            return super().apply(layer, x, bias)  # type: ignore[misc]
        y = torch.ops.oracle.linear(x, handle)
        return y if bias is None else y + bias


def _linear_spec(layer: Any, scheme: Any, k: int, parts: list[int], dtype: Any) -> Any:
    if getattr(scheme, "weight_quant_key", None) is not None:
        weight = mapping.weight_quant(scheme.weight_quant_key)
        act = mapping.act_quant(getattr(scheme, "activation_quant_key", None))
    elif getattr(scheme, "quant_type", None) is not None:
        weight = mapping.scalar_weight_quant(scheme.quant_type, getattr(scheme, "group_size", None),
                                             zero_points=not getattr(scheme, "symmetric", True))
        act = None
    else:
        raise ValueError(f"scheme {type(scheme).__name__} states neither a weight QuantKey nor a ScalarType")
    return linear_layer(layer.prefix, in_features=k, out_features=sum(parts), weight=weight, act=act,
                        has_bias=bool(getattr(layer, "has_bias", False)), dtype=torch_dtype_name(dtype),
                        tp_size=int(getattr(layer, "tp_size", 1)))


def _linear_arguments(layer: torch.nn.Module, st: LayerState) -> tuple[dict[str, Any], list[str]]:
    params = _params(layer)
    tensors = {n: p.data for n, p in params.items()}
    convert.refuse_act_order(tensors, st.layer.in_features, st.layer.group_size, st.name)
    per_part = ("weight_scale", "input_scale") if st.layer.weight_format == "fp8_tensor" else ("input_scale",)
    parts = convert.split_parts(tensors, st.rows, per_part=per_part, drop=("weight_shape", "weight_g_idx"))
    return convert.linear_arguments(DIALECT, st.layer, parts, st.rows), list(params)


# ================================================================ MoE
class OracleMoEMethod(_OracleMethod):
    """Mixin over vLLM's fused-MoE quant method (compressed-tensors W8A8 FP8, WNA16, ...)."""

    def create_weights(self, layer: torch.nn.Module, num_experts: int, hidden_size: int,
                       intermediate_size_per_partition: int, params_dtype: torch.dtype, **extra: Any) -> None:
        st = self._oracle
        super().create_weights(layer, num_experts, hidden_size, intermediate_size_per_partition,  # type: ignore[misc]
                               params_dtype, **extra)
        st.decide(lambda: _moe_spec(layer, self, st, params_dtype))
        if st.run.mode == "shadow":
            st.emit()

    def _oracle_arguments(self, layer: torch.nn.Module) -> tuple[dict[str, Any], list[str]]:
        return _moe_arguments(layer, self._oracle)

    @property
    def is_monolithic(self) -> bool:
        if self._oracle.serving:
            return False
        return super().is_monolithic  # type: ignore[misc]

    def apply(self, layer: torch.nn.Module, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
              shared_experts: Any = None, shared_experts_input: Any = None) -> torch.Tensor:
        handle = self._oracle.handle
        if handle is None:
            return super().apply(layer, x, topk_weights, topk_ids, shared_experts,  # type: ignore[misc]
                                 shared_experts_input)
        # vLLM may hand a fused-MoE call rows whose contents are undefined (buffers sized for the largest
        # batch under torch.compile); their router weights can be NaN, which kernels that check their
        # inputs refuse. Those rows are discarded by vLLM, so they are zeroed here; real rows are unchanged.
        return moe_call(x, torch.nan_to_num(topk_weights.float(), nan=0.0, posinf=0.0, neginf=0.0), topk_ids,
                        handle)


def moe_call(x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, handle: int) -> torch.Tensor:
    """The oracle MoE op (a module function, so a negative-control test can replace it)."""
    return torch.ops.oracle.moe(x, topk_weights, topk_ids, handle)


def _moe_spec(layer: Any, method: Any, st: LayerState, dtype: Any) -> Any:
    cap = st.capture
    if cap.weight_key is None:
        raise ValueError("vLLM's MoE backend selector was not called with a weight QuantKey")
    wq = mapping.weight_quant(cap.weight_key, group_size=getattr(method, "group_size", None) or cap.group_size)
    moe = method.moe
    par = moe.moe_parallel_config
    return moe_layer(st.name, num_experts=int(moe.num_experts), top_k=int(moe.experts_per_token),
                     hidden_size=int(moe.hidden_dim), intermediate_size=int(moe.intermediate_size), weight=wq, act=mapping.act_quant(cap.activation_key),
                     activation=str(getattr(moe.activation, "value", moe.activation)).lower(),
                     has_bias=bool(getattr(moe, "has_bias", False)), dtype=torch_dtype_name(dtype),
                     tp_size=int(par.tp_size), ep_size=int(par.ep_size), expert_map=bool(par.use_ep),
                     use_all2all=bool(getattr(par, "use_all2all_kernels", False)),
                     eplb=bool(getattr(par, "enable_eplb", False)),
                     apply_router_weight_on_input=bool(getattr(layer, "apply_router_weight_on_input", False)))


def _moe_arguments(layer: torch.nn.Module, st: LayerState) -> tuple[dict[str, Any], list[str]]:
    w13 = {n[len("w13_"):]: p.data for n, p in _params(layer, "w13_").items()}
    w2 = {n[len("w2_"):]: p.data for n, p in _params(layer, "w2_").items()}
    convert.refuse_act_order(w13, st.layer.hidden_size, st.layer.group_size, f"{st.name}.w13")
    convert.refuse_act_order(w2, st.layer.intermediate_size // st.layer.tp_size, st.layer.group_size, f"{st.name}.w2")
    per_shard = ("weight_scale",) if st.layer.weight_format == "fp8_tensor" else ()
    args = convert.moe_arguments(DIALECT, st.layer, w13, w2, per_shard=per_shard,
                                 drop=("weight_shape", "weight_g_idx"))
    return args, [f"w13_{n}" for n in w13] + [f"w2_{n}" for n in w2]
