"""The plugin contract, with throwaway plugins registered directly on a Registry (no install needed).

What pluggy promises is what a plugin gets: only the arguments it declares, a misspelt hook
reported at registration, a failing plugin isolated. On top: one owner per backend, additive
tier insertion, plugin commands. (tests/test_entry_points.py covers the pip-installed road.)
"""
from __future__ import annotations

import pytest

from oracle import KernelConfig, LinearLayer, MoELayer, Platform, hookimpl, select_backend
from oracle.cli import main
from oracle.registry import Registry
from oracle.session import load_policy, reset_registry, set_registry


H200 = Platform.preset("h200")


def kernels_file(backend: str, name: str, tier: str = "optimized") -> dict:
    """A kernels mapping with one linear kernel for fp8_block (no requirements)."""
    return {"backend": backend, "tier": tier, "kernels": [{
        "name": name, "op": "linear", "implementation": "oracle.kernel:Kernel",
        "modes": [{"weight": "fp8_block", "activation": "fp8", "name": "w8a8"}]}]}


class Declares:
    """Registers the given kernels mappings and nothing else."""

    def __init__(self, *sources):
        self.sources = sources

    @hookimpl
    def register_kernels(self, register):
        for source in self.sources:
            register(source)


def linear(name="model.layers.0.mlp.down_proj", k=1024):
    return LinearLayer(name=name, in_features=k, out_features=1024, weight_format="fp8_block")


# ---------------------------------------------------------------- hooks the way pluggy calls them
def test_misspelt_hook_is_a_plugin_error_and_the_plugin_is_skipped(toy_plugin):
    class Misspelt:
        @hookimpl
        def register_kernel(self, register):   # no such hook: register_kernels
            register(kernels_file("typo", "typo.linear"))

    reg = Registry.from_plugins([("typo", Misspelt()), ("toy", toy_plugin)])
    failure = next(f for f in reg.failures if f.plugin == "typo")
    assert failure.stage == "register" and "register_kernel" in failure.message
    assert "register_kernels" in failure.message          # the message lists the real hook names
    assert [p.name for p in reg.plugins] == ["toy"]        # the toy plugin still loaded
    assert "toyfast.moe" in reg.by_name


def test_hook_declaring_fewer_arguments_gets_only_those():
    seen = []

    class OnlyLayer(Declares):
        @hookimpl
        def can_implement(self, layer):                      # declares one of the four arguments
            seen.append(layer.name)
            return "K is too small for this plugin" if layer.in_features < 512 else None

    reg = Registry.from_plugins([("few", OnlyLayer(kernels_file("few", "few.linear")))])
    assert reg.failures == []
    small = select_backend(linear("small", k=256), H200, env={}, registry=reg)
    large = select_backend(linear("large", k=1024), H200, env={}, registry=reg)
    assert small.status == "no_kernel" and small.candidates[0].reason == "K is too small for this plugin"
    assert "few: can_implement" in small.candidates[0].rule
    assert (large.status, large.kernel) == ("selected", "few.linear")
    assert seen == ["small", "large"]


def test_can_implement_is_given_the_platform():
    class Platformed(Declares):
        @hookimpl
        def can_implement(self, kernel, platform):
            return None if platform.capability == (9, 0) else f"{kernel.name} is tuned for SM90 only, not {platform.sm}"

    reg = Registry.from_plugins([("plat", Platformed(kernels_file("plat", "plat.linear")))])
    assert select_backend(linear(), H200, env={}, registry=reg).kernel == "plat.linear"
    d = select_backend(linear(), Platform.preset("b200"), env={}, registry=reg)
    assert d.status == "no_kernel" and "tuned for SM90 only, not SM100" in d.candidates[0].reason


def test_hook_asking_for_an_undeclared_argument_is_refused_at_registration():
    class Greedy(Declares):
        @hookimpl
        def can_implement(self, kernel, tokens):   # `tokens` is no argument of the spec
            return None

    reg = Registry.from_plugins([("greedy", Greedy(kernels_file("greedy", "greedy.linear")))])
    failure = next(f for f in reg.failures if f.plugin == "greedy")
    assert failure.stage == "register" and "tokens" in failure.message
    assert "greedy.linear" not in reg.by_name


def test_a_raising_hook_stays_with_its_plugin(toy_plugin):
    class Broken:
        @hookimpl
        def register_kernels(self, register):
            raise RuntimeError("kernels.yaml missing from the wheel")

    reg = Registry.from_plugins([("broken", Broken()), ("toy", toy_plugin)])
    assert [str(f) for f in reg.failures] == [
        "broken (register_kernels): RuntimeError: kernels.yaml missing from the wheel"]
    assert "toyfast.moe" in reg.by_name


# ---------------------------------------------------------------- one owner per backend name
def test_second_plugin_claiming_a_backend_is_its_error():
    first = Declares(kernels_file("shared", "shared.linear"))
    second = Declares(kernels_file("Shared", "impostor.linear"))     # same backend, other spelling
    reg = Registry.from_plugins([("first", first), ("second", second)])
    assert reg.backend_owner == {"shared": "first"}
    assert [k.name for k in reg.kernels] == ["shared.linear"]
    (failure,) = reg.failures
    assert failure.plugin == "second"                                  # blamed on the claimant
    assert "backend 'shared'" in failure.message and "belongs to plugin first" in failure.message


def test_kernel_name_of_another_plugin_is_the_second_plugins_error():
    reg = Registry.from_plugins([("a", Declares(kernels_file("alpha", "same.name"))),
                                 ("b", Declares(kernels_file("beta", "same.name")))])
    (failure,) = reg.failures
    assert failure.plugin == "b" and "duplicate kernel name 'same.name'" in failure.message
    assert reg.by_name["same.name"].plugin == "a"


# ---------------------------------------------------------------- additive ordering
class InsertsAfterOptimized(Declares):
    def __init__(self, backend: str):
        super().__init__(kernels_file(backend, f"{backend}.linear", tier=backend))
        self.backend = backend

    @hookimpl
    def register_tiers(self, insert):
        insert(self.backend, after="optimized", ops=["linear"])


def test_two_plugins_insert_after_optimized_without_replacing_each_other(tmp_path, toy_plugin):
    reg = Registry.from_plugins([("toy", toy_plugin), ("alpha", InsertsAfterOptimized("alpha")),
                                 ("beta", InsertsAfterOptimized("beta"))])
    assert reg.failures == []
    policy = load_policy(registry=reg)
    tiers, rule = policy.ordering_for("linear", "fp8_block")
    assert tiers == ["optimized", "alpha", "beta", "emulation"]   # load order, nothing replaced
    assert "alpha by plugin alpha (tests/test_plugin_contract.py:" in rule and "beta by plugin beta" in rule
    assert policy.ordering_for("moe", "mxfp4")[0] == ["optimized", "emulation"]   # ops=[linear]
    # the toyfast (optimized) kernel rejects K % 128; alpha is tried next, then beta
    d = select_backend(linear(k=1000), H200, env={}, registry=reg, policy=policy)
    assert [c.kernel for c in d.candidates] == ["toyfast.linear", "alpha.linear"]
    assert (d.kernel, d.selected_by) == ("alpha.linear", "policy")
    # the user's own file still has the last word
    user = tmp_path / "order.yaml"
    user.write_text("version: 1\nordering:\n  linear:\n    default: [beta, optimized]\n")
    assert load_policy([user], registry=reg).ordering_for("linear", "fp8_block")[0] == ["beta", "optimized"]


def test_insert_needs_exactly_one_anchor():
    class NoAnchor:
        @hookimpl
        def register_tiers(self, insert):
            insert("gamma")

    reg = Registry.from_plugins([("noanchor", NoAnchor())])
    assert "give exactly one of after= or before=" in str(reg.failures[0])


# ---------------------------------------------------------------- plugin commands
class Hello:
    NAME = "hello"

    @staticmethod
    def add_parser(subparsers):
        p = subparsers.add_parser("hello", help="say hello")
        p.add_argument("--who", default="world")
        return p

    @staticmethod
    def run(args):
        if args.who == "crash":
            raise ZeroDivisionError("division by zero")
        print(f"hello {args.who}")
        return 0


class AddsCommands:
    def __init__(self, *commands):
        self.commands = commands

    @hookimpl
    def register_commands(self, register):
        for command in self.commands:
            register(command)


@pytest.fixture
def with_plugins():
    def install(*plugins):
        registry = Registry.from_plugins(plugins)
        set_registry(registry)
        return registry
    yield install
    reset_registry()


def test_plugin_adds_a_command(with_plugins, capsys):
    with_plugins(("greeter", AddsCommands(Hello)))
    assert main(["hello", "--who", "oracle"]) == 0
    assert capsys.readouterr().out == "hello oracle\n"


def test_crashing_plugin_command_is_reported_not_a_traceback(with_plugins, capsys):
    with_plugins(("greeter", AddsCommands(Hello)))
    assert main(["hello", "--who", "crash"]) == 1
    err = capsys.readouterr().err
    assert "command 'hello' of plugin greeter failed: ZeroDivisionError" in err and "Traceback" not in err


def test_plugin_command_may_not_shadow_a_builtin_or_another_plugins(with_plugins, capsys):
    class FakeExplain(Hello):
        NAME = "explain"

    registry = with_plugins(("first", AddsCommands(Hello)), ("second", AddsCommands(FakeExplain, Hello)))
    assert main(["kernels", "--device", "h200"]) == 0
    out = capsys.readouterr().out
    assert "second (register_commands): OracleError: command 'hello' is already added by plugin first" in out
    assert "second (register_commands): command 'explain' is a built-in command; not added" in out
    assert registry.commands["hello"].plugin == "first"


# ---------------------------------------------------------------- selected_by
def test_selected_by_says_whether_the_caller_or_the_policy_chose(select):
    experts = MoELayer(name="experts", num_experts=32, top_k=4, hidden_size=2048, intermediate_size=1024,
                       weight_format="mxfp4")
    assert select(experts).selected_by == "policy"
    explicit = select(experts, config=KernelConfig(moe_backend="toyslow"))
    assert (explicit.kernel, explicit.selected_by) == ("toyslow.any", "explicit")
    assert explicit.to_dict()["selected_by"] == "explicit"
