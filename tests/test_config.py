import pytest

from harness.config import FULL, load_config_file, make_config
from harness.core.errors import ConfigError


def test_defaults_are_the_main_job():
    cfg = make_config()
    assert cfg.methods == ["all"]
    assert cfg.tasks == ["sr-t", "ner"]
    assert cfg.world == "bible"
    assert cfg.dim_values() == [None]
    assert cfg.profile == "cpu"


def test_toml_and_yaml_files_and_flags_override(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('methods = ["random", "ofa"]\ntasks = "mlm"\ndims = [100, "full"]\nseeds = [1, 2]\n'
                    'cpt-steps = 5\n[method_params.ofa]\nk = 5\n')
    yaml = tmp_path / "c.yaml"
    yaml.write_text("methods: random\nworld: synthetic\nlangs: [qab_Latn]\n")
    cfg = make_config(load_config_file(toml), {"seeds": "3"})
    assert cfg.methods == ["random", "ofa"]
    assert cfg.tasks == ["mlm"]
    assert cfg.dims == [100, FULL] and cfg.dim_values() == [100, None]
    assert cfg.seeds == [3]  # the flag wins over the file
    assert cfg.cpt_steps == 5
    assert cfg.method_params == {"ofa": {"k": 5}}
    cfg2 = make_config(load_config_file(yaml))
    assert cfg2.methods == ["random"] and cfg2.world == "synthetic" and cfg2.langs == ["qab_Latn"]


@pytest.mark.parametrize("values, key", [
    ({"metods": "random"}, "metods"),
    ({"seeds": "one"}, "seeds"),
    ({"seeds": [1.5]}, "seeds"),
    ({"dims": "abc"}, "dims"),
    ({"dims": [0]}, "dims"),
    ({"cpt_steps": -1}, "cpt_steps"),
    ({"cpt_steps": True}, "cpt_steps"),
    ({"world": 3}, "world"),
    ({"method_params": {"ofa": 3}}, "method_params"),
    ({"fail_fast": "yes"}, "fail_fast"),
])
def test_bad_values_name_the_key(values, key):
    with pytest.raises(ConfigError) as ei:
        make_config(values)
    assert repr(key) in str(ei.value)
    assert ei.value.exit_code == 2


def test_unknown_key_suggests():
    with pytest.raises(ConfigError, match="Did you mean 'methods'"):
        make_config({"metods": "random"})


def test_unknown_profile_and_device():
    with pytest.raises(ConfigError, match="profile"):
        make_config({"profile": "gpu-big"})
    with pytest.raises(ConfigError, match="device"):
        make_config({"device": "tpu"})


def test_bad_file(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("methods = [")
    with pytest.raises(ConfigError, match="could not be parsed"):
        load_config_file(p)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config_file(tmp_path / "missing.yaml")
    q = tmp_path / "c.json"
    q.write_text("{}")
    with pytest.raises(ConfigError, match=r"\.toml"):
        load_config_file(q)


def test_unknown_language_is_named(synthetic_world):
    from harness.plan import make_plan

    cfg = make_config({"world": "synthetic", "methods": "random", "tasks": "mlm", "langs": "qab_Latn,qad_Cyrk"})
    with pytest.raises(ConfigError) as ei:
        make_plan(cfg, synthetic_world)
    assert "qad_Cyrk" in str(ei.value) and "qad_Cyrl" in str(ei.value)


def test_seeds_default_to_three_on_real_worlds_and_one_on_the_synthetic_world():
    from harness.config import run_seeds
    from harness.core.profiles import DEFAULT_SEEDS

    assert DEFAULT_SEEDS == [1, 2, 3]
    assert make_config().seeds is None  # resolved against the world
    assert run_seeds(make_config(), "bible") == [1, 2, 3]
    assert run_seeds(make_config(), "glot500") == [1, 2, 3]
    assert run_seeds(make_config({"world": "synthetic"}), "synthetic") == [1]
    assert run_seeds(make_config({"seeds": "4,5"}), "synthetic") == [4, 5]
    assert run_seeds(make_config({"seeds": "7"}), "bible") == [7]
    assert run_seeds(make_config(), "no-such-world") == [1, 2, 3]  # reported later, where the world is loaded


def test_the_main_job_plans_three_seeds_per_cell(synthetic_world):
    from harness.plan import make_plan

    cfg = make_config({"world": "synthetic", "methods": "random,ofa", "tasks": "mlm"})
    assert sorted({c.seed for c in make_plan(cfg, synthetic_world).cells}) == [1]
    cfg = make_config({"world": "synthetic", "methods": "random,ofa", "tasks": "mlm", "seeds": "1,2,3"})
    plan = make_plan(cfg, synthetic_world)
    assert len(plan.cells) == 6 and sorted({c.seed for c in plan.cells}) == [1, 2, 3]


def test_a_config_without_seeds_survives_the_round_trip_to_a_worker():
    from harness.config import config_to_dict

    cfg = make_config()
    again = make_config(config_to_dict(cfg))  # what a worker process rebuilds from the parent's config
    assert again.seeds is None and again == cfg


def test_a_bad_value_is_named_as_it_was_given():
    """A flag's value is refused naming the flag (``--precision``), a config file's naming its key."""
    with pytest.raises(ConfigError, match=r"^--precision: expected one of fp32, bf16, fp16, auto, got 'banana'"):
        make_config(overrides={"precision": "banana"})
    with pytest.raises(ConfigError, match=r"^config key 'precision': expected one of"):
        make_config({"precision": "banana"})
    with pytest.raises(ConfigError, match=r"^--cpt-steps: expected a non-negative integer"):
        make_config(overrides={"cpt_steps": -3})
    with pytest.raises(ConfigError, match=r"^config key 'cpt_steps'"):
        make_config({"cpt_steps": -3})


def test_seeds_are_unsigned_32_bit_integers():
    assert make_config({"seeds": [0, 2**32 - 1]}).seeds == [0, 2**32 - 1]
    for bad in ([-1], [2**32], [1, -7]):
        with pytest.raises(ConfigError, match=r"0 to 4294967295"):
            make_config(overrides={"seeds": bad})


@pytest.mark.parametrize("key, good, bad", [
    ("language_sampling", ["shuffled", "smoothed"], ["smoothd", "", None, 1]),
    ("sampling_alpha", [0.3, 1, 1.0], [0, 1.5, -0.1, "0.3", True, float("nan")]),
    ("lr", [1e-4, 1], [0, -1e-4, "fast"]),
    ("mlm_probability", [0.15], [0, 1, 1.2]),
    ("steps", [0, 10], [-1, 2.5, "10"]),
    ("per_device_batch", [1, 32], [0, True]),
    ("checkpoints", [[], [5, 10]], [[0], "5", [1.5]]),
    ("max_sentences_per_language", [None, 100], [0]),
    ("eval_tasks", [True, False], ["yes", 1]),
    ("precision", ["bf16", "FP32"], ["fp8", 16]),
])
def test_every_cpt_value_is_checked(key, good, bad):
    from harness.spec import cpt_value_problem

    assert all(cpt_value_problem(key, v) is None for v in good), key
    assert all(cpt_value_problem(key, v) for v in bad), key
    assert cpt_value_problem("a_setting_without_a_rule", object()) is None
