"""The one name-matching rule shared by ignore / modules_to_not_convert / exclude_modules / targets."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oracle.errors import InputError
from oracle.models.matching import NameMatcher

segment = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
names = st.lists(segment, min_size=2, max_size=6).map(".".join)


@given(names, st.data())
def test_enclosing_modules_and_suffixes_match(name, data):
    parts = name.split(".")
    cut = data.draw(st.integers(1, len(parts)))
    assert NameMatcher([".".join(parts[:cut])]).match(name) is not None      # the module or an enclosing one
    start = data.draw(st.integers(0, len(parts) - 1))
    assert NameMatcher([".".join(parts[start:])]).match(name) is not None    # a dotted suffix


@given(names, segment)
def test_a_longer_last_segment_never_matches(name, tail):
    # "mlp.gate" must not catch "mlp.gate_proj": matching stops at dots
    assert NameMatcher([name]).match(name + tail) is None


def test_globs_and_regexes():
    m = NameMatcher(["model.layers.*.self_attn", "re:.*mlp\\.(gate|up)_proj$"])
    assert m.match("model.layers.12.self_attn.q_proj") == "model.layers.*.self_attn"
    assert m.match("model.layers.1.mlp.gate_proj") == "re:.*mlp\\.(gate|up)_proj$"
    assert m.match("model.layers.1.mlp.down_proj") is None
    assert m.match("model.layers.1.mlp.gate") is None


def test_bad_regex_names_the_field():
    with pytest.raises(InputError, match="config.json: quantization_config.ignore: invalid regular expression"):
        NameMatcher(["re:(unclosed"], source="config.json", field="quantization_config.ignore")
