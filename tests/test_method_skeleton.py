"""The method skeleton: declared parameters (checks, defaults, listing), the profile's settings and the cost estimate
on the method, the combine module's parts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.core.errors import ConfigError
from harness.core.registry import METHODS
from methods.base import Method
from methods.params import Param, describe, fasttext_settings, resolve

BUILTIN = ["random", "random-map", "ofa", "hyperofa", "focus", "wechsel", "wechsel+overlap", "tiktotok", "fvt",
           "mean-cov"]


def test_resolve_checks_names_ranges_and_choices():
    params = (Param("k", 10, low=1), Param("t", 0.1, above=0), Param("mode", "a", choices=("a", "b")),
              Param("n", None, low=1), Param("w", [1, 2], check=lambda v: len(v) == 2, expect="two numbers"))
    assert resolve("m", params, {"k": 3}) == {"k": 3, "t": 0.1, "mode": "a", "n": None, "w": [1, 2]}
    for bad, words in (({"kk": 1}, "no parameter(s) ['kk']"), ({"k": 0}, "m: k must be >= 1, not 0"),
                       ({"t": 0}, "m: t must be > 0"), ({"mode": "c"}, "m: mode must be one of ['a', 'b']"),
                       ({"n": 0}, "m: n must be >= 1"), ({"k": "x"}, "must be a number"),
                       ({"w": [1]}, "m: w must be two numbers")):
        with pytest.raises(ConfigError) as exc:
            resolve("m", params, bad)
        assert words in str(exc.value)
    with pytest.raises(ConfigError, match="takes no parameters"):
        resolve("m", (), {"x": 1})


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_method_declares_its_parameters(name):
    cls = METHODS.get(name)
    assert issubclass(cls, Method)
    assert cls.defaults == {p.name: p.default for p in cls.params}
    assert [r["name"] for r in describe(cls.params)] == [p.name for p in cls.params]
    assert all(p.problem(p.default) is None for p in cls.params), "a default must pass its own check"
    assert all(cls.profile_defaults(prof).keys() <= cls.defaults.keys() for prof in ("cpu", "paper"))
    assert cls.cost_estimate("paper") > 0


def test_profiles_and_plan_ask_the_methods():
    from harness.core.profiles import profile
    from harness.plan import PAPER_ESTIMATES

    cpu = profile("cpu")["method_params"]
    assert cpu.get("focus") == {"dim": 50, "epochs": 1, "bucket": 200_000, "max_lines": None}
    assert cpu.get("hyperofa") == {"epochs": 60, "patience": 5}
    assert cpu.get("wechsel+overlap") == cpu.get("wechsel")
    assert cpu.get("random", {}) == {} and cpu.get("no-such-method", {}) == {}
    assert profile("paper")["method_params"].get("hyperofa") == {"preset": "paper"}
    init = PAPER_ESTIMATES["init"]
    assert (init["random"], init["ofa"], init["hyperofa"], init["tiktotok"], init["fvt"]) == (0.02, 0.3, 1.0, 0.3, 0.5)
    assert init.get("no-such-method", init["default"]) == 0.5


def test_fasttext_settings_keep_their_keys():
    focus = METHODS.get("focus").defaults
    assert fasttext_settings(focus, 7) == {"model": "cbow", "dim": 300, "epoch": 3, "minCount": 10, "neg": 10,
                                           "minn": 3, "maxn": 6, "bucket": 2_000_000, "lr": 0.05, "seed": 0,
                                           "thread": 1}
    tik = METHODS.get("tiktotok").defaults
    assert "neg" not in fasttext_settings(tik) and fasttext_settings({**focus, "fasttext_seed": None}, 7)["seed"] == 7


def test_hyperofa_auto_preset_follows_the_profile():
    from methods.base import InitContext
    from methods.hypernetwork import PRESETS

    cls = METHODS.get("hyperofa")

    def ctx(profile):
        return InitContext(source_matrix=torch.zeros(2, 2), source_tokenizer=None, target_tokenizer=None,
                           mapping_for=None, world=type("W", (), {"name": "glot500"})(), seed=0, profile=profile)

    p = cls.defaults
    assert cls()._preset(p, ctx("cpu"), "mono", 100)[0] == PRESETS["cpu"]
    assert cls()._preset(p, ctx(None), "mono", 100)[0] == PRESETS["cpu"]
    assert cls()._preset(p, ctx("paper"), "mono", 100)[0] == PRESETS["HN-R-100"]
    assert cls()._preset({**p, "preset": "paper"}, ctx("cpu"), "multi", 400)[0] == PRESETS["HN-X-400"]


def test_combine_parts_match_the_direct_computation():
    from methods.combine import Cosine, SparsemaxTopK, TopKSoftmax, weighted_average
    from methods.sparsemax import sparsemax

    g = torch.Generator().manual_seed(0)
    t, s, rows = torch.randn(37, 5, generator=g), torch.randn(50, 5, generator=g), torch.randn(50, 3, generator=g)
    t[3] = 0
    c = weighted_average(t, s, rows, similarity=Cosine(torch.float64), weighting=TopKSoftmax(4, 0.1), block_size=8)
    sims = torch.nn.functional.normalize(t.double(), dim=1) @ torch.nn.functional.normalize(s.double(), dim=1).T
    vals, idx = torch.topk(sims, 4, dim=1)
    assert torch.equal(c.neighbours[[0, 1, 2]], idx[[0, 1, 2]])
    w = torch.softmax(vals / 0.1, dim=1)
    assert torch.allclose(c.rows.double(), torch.einsum("bk,bkd->bd", w, rows.double()[idx]), atol=1e-6)
    d = weighted_average(t, s, rows, similarity=Cosine(torch.float32), weighting=SparsemaxTopK(8), block_size=16)
    dense = sparsemax(sims.float())
    assert torch.allclose(d.rows, dense @ rows, atol=1e-5)
    assert [list(x) for x in d.supports] == [list(np.flatnonzero(r)) for r in dense.numpy() > 0]


def test_harness_list_shows_a_methods_parameters(capsys, harness_home):
    from harness.cli import main

    assert main(["list", "--method", "wechsel"]) == 0
    out = capsys.readouterr().out
    assert "[method_params.wechsel]" in out and "neighbors" in out and "source_max_lines" in out
    assert main(["list", "--method", "fvt"]) == 0
    assert "takes no parameters" in capsys.readouterr().out
