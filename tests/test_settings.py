"""Each run setting is declared once (a field of RunConfig with its kind, default, help and check); the config
file keys, the `harness run` / `harness plan` flags and the merge order defaults < file < flags follow from it."""

import dataclasses

import pytest

from harness.cli import build_parser
from harness.config import RunConfig, config_from_flags, make_config

FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
# a value for each flagged setting, as typed on the command line, and what the config then holds
SAMPLES = {
    "methods": ("random,ofa", ["random", "ofa"]), "tasks": ("mlm", ["mlm"]), "world": ("synthetic", "synthetic"),
    "source": ("multi", "multi"), "langs": ("qab_Latn", ["qab_Latn"]), "dims": ("8,full", [8, "full"]),
    "seeds": ("4,5", [4, 5]), "cpt_steps": ("7", 7), "cpt_checkpoints": ("2,4", [2, 4]),
    "profile": ("paper", "paper"), "device": ("cpu", "cpu"), "tracking_uri": ("sqlite:///x.db", "sqlite:///x.db"),
    "experiment": ("e", "e"), "executor": ("ray", "ray"), "ray_address": ("auto", "auto"),
    "max_retries": ("5", 5), "workers": ("2", 2), "fail_fast": (None, True), "rerun": ("failed", "failed"),
    "keep_products": (None, True), "isolate_cells": (None, True), "precision": ("bf16", "bf16"),
}


def _parse(*argv: str):
    return build_parser().parse_args(["run", *argv])


def test_every_setting_with_a_help_text_is_a_flag_and_every_flag_a_setting():
    flagged = {n for n, f in FIELDS.items() if f.metadata["help"]}
    assert flagged == set(SAMPLES)
    parser = build_parser()
    run = next(a for a in parser._subparsers._group_actions[0].choices.values() if a.prog.endswith(" run"))
    dests = {a.dest for a in run._actions} - {"help", "config", "cpt_devices"}
    assert dests == flagged
    for name in set(FIELDS) - flagged:  # the tables: config-file keys only
        assert FIELDS[name].metadata["kind"] in {"table", "params"}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_flag_reaches_its_key_and_wins_over_the_file(name, tmp_path):
    typed, expected = SAMPLES[name]
    flag = "--" + name.replace("_", "-")
    cfg = config_from_flags(_parse(flag) if typed is None else _parse(flag, typed))
    assert getattr(cfg, name) == expected
    default = getattr(RunConfig(), name)
    assert getattr(make_config(), name) == default
    # the file sets the key, the flag overrides it, a key the flags leave alone keeps the file's value
    file_value = {"fail_fast": False, "keep_products": False, "isolate_cells": False, "max_retries": 1, "workers": 1, "cpt_steps": 1}.get(name, "1")
    if name in {"dims", "seeds", "cpt_checkpoints"}:
        file_value = [1]
    elif name in {"profile"}:
        file_value = "cpu"
    elif name == "device":
        file_value = "auto"
    elif name == "executor":
        file_value = "local"
    elif name == "rerun":
        file_value = "all"
    elif name == "precision":
        file_value = "fp32"
    (tmp_path / "c.toml").write_text(f"{name} = {file_value!r}\n".replace("False", "false").replace("'", '"'))
    args = _parse("--config", str(tmp_path / "c.toml"), *([flag] if typed is None else [flag, typed]))
    assert getattr(config_from_flags(args), name) == expected
    from_file = config_from_flags(_parse("--config", str(tmp_path / "c.toml")))
    assert getattr(from_file, name) == make_config({name: file_value}).__getattribute__(name)
