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


# -- small things a new user meets first -------------------------------------------------------------------------
def test_harness_version_names_the_harness_and_its_libraries():
    import subprocess
    import sys
    from pathlib import Path

    import torch

    import harness

    proc = subprocess.run([sys.executable, "-m", "harness.cli", "--version"], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr
    first, libraries = proc.stdout.splitlines()[:2]
    assert first.startswith(f"harness {harness.__version__}")
    assert f"torch {torch.__version__}" in libraries and "mlflow " in libraries and "transformers " in libraries


def test_the_experiment_kind_is_one_the_installed_mlflow_knows_and_the_readme_names_it():
    """MLflow's UI opens an experiment on the page of its kind; the harness tags its experiments with the kind of
    model development (the UI's "Machine learning", its model-training workflow), and the README says which."""
    import re
    from pathlib import Path

    import mlflow

    from harness.core.tracking import EXPERIMENT_KIND

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert f"`{EXPERIMENT_KIND}`" in readme
    bundles = sorted(Path(mlflow.__file__).parent.glob("server/js/build/static/js/main.*.js"))
    if not bundles:
        pytest.skip("this MLflow ships no UI bundle to read its experiment kinds from")
    kinds = set(re.findall(r'\.[A-Z_]+="([a-z_]+_development[a-z_]*|finetuning|forecasting|automl)"',
                           bundles[0].read_text(errors="replace")))
    assert EXPERIMENT_KIND in kinds and not EXPERIMENT_KIND.startswith("genai"), kinds


def test_the_emulated_accelerators_run_header_says_what_it_emulates(synthetic_world, monkeypatch):
    """Under HARNESS_EMULATE_ACCELERATOR the run header names the emulation, not a bare ``device cpu``."""
    import io

    from rich.console import Console

    import harness.runner as runner_mod
    from harness.core.cache import ProductCache
    from harness.runner import Runner
    from harness.spec import resolve

    out = io.StringIO()
    monkeypatch.setattr(runner_mod, "console", Console(file=out, width=300))

    class Header(Exception):
        pass

    def stop(self):
        raise Header

    monkeypatch.setattr(ProductCache, "clean_stale", stop)  # the header is printed: stop there
    for emulate, words in (("1", "device cpu emulating 2 GPUs (HARNESS_EMULATE_ACCELERATOR)"), ("", "device cpu:")):
        monkeypatch.setenv("HARNESS_EMULATE_ACCELERATOR", emulate)
        monkeypatch.setenv("HARNESS_EMULATE_GPUS", "2")
        cfg = make_config(overrides={"world": "synthetic", "methods": ["random"], "tasks": ["sr-t"], "device": "cpu"})
        out.truncate(0)
        with pytest.raises(Header):
            Runner(resolve(cfg, synthetic_world), synthetic_world, tracker=object()).run()
        assert words in out.getvalue(), out.getvalue()
