"""What the harness home keeps: compact init products, `harness cache du` and `harness cache prune`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from harness.initialize import BODY_FILE, initialize_model, load_model

X = torch.tensor([[0, 5, 9, 14, 22, 2], [0, 7, 30, 2, 1, 1]])


def _outputs(model):
    with torch.no_grad():
        return model(input_ids=X, attention_mask=(X != 1).long()).logits


@pytest.mark.parametrize("method,dim", [("random", None), ("fvt", None), ("random", 16)])
def test_compact_init_product_loads_the_same_model(synthetic_world, tmp_path, method, dim):
    full, compact = tmp_path / "full", tmp_path / "compact"
    for out, flag in ((full, False), (compact, True)):
        initialize_model(synthetic_world, synthetic_world.default_source, method, dim=dim, seed=3, params={},
                         out_dir=out, compact=flag)
    assert not (full / BODY_FILE).exists() and (compact / BODY_FILE).is_file()
    body = json.loads((compact / BODY_FILE).read_text())
    assert body["tensors"]  # the encoder body comes from the source model
    assert not any("word_embeddings" in k for k in body["tensors"])
    assert (compact / "model.safetensors").stat().st_size < (full / "model.safetensors").stat().st_size
    a, b = load_model(full), load_model(compact)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    assert torch.equal(_outputs(a), _outputs(b))


def test_compact_init_product_refuses_a_changed_source(synthetic_world, tmp_path):
    from harness.core.errors import HarnessError

    out = tmp_path / "compact"
    initialize_model(synthetic_world, synthetic_world.default_source, "random", dim=None, seed=1, params={},
                     out_dir=out, compact=True)
    body = json.loads((out / BODY_FILE).read_text())
    body["files"] = {k: "0" * 64 for k in body["files"]}
    (out / BODY_FILE).write_text(json.dumps(body))
    with pytest.raises(HarnessError, match="missing or changed"):
        load_model(out)


# -- harness cache du / prune -----------------------------------------------------------------------------------
DAY = 86400.0


def _folder(path: Path, size: int, marker: dict | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "weights.bin").write_bytes(b"\0" * size)
    if marker is not None:
        (path / "_DONE.json").write_text(json.dumps(marker))
    return path


@pytest.fixture
def home(tmp_path):
    """A harness home with one product of each kind (sizes in KB so that each kind is told apart)."""
    from harness.core.hashing import hash_obj

    h = tmp_path / "home"
    manifest = {"name": "toy", "version": 1}
    _folder(h / "worlds" / "toy-v1", 9_000)
    (h / "worlds" / "toy-v1" / "manifest.json").write_text(json.dumps(manifest))
    now = time.time()
    _folder(h / "products" / "init" / "i1", 100_000,
            {"kind": "init", "inputs": {"world": hash_obj(manifest)}, "created": now - 10 * DAY})
    _folder(h / "products" / "init" / "i2", 110_000,
            {"kind": "init", "inputs": {"world": "0123456789abcdef"}, "created": now})
    _folder(h / "products" / "cpt" / "c1", 200_000, {"kind": "cpt", "world": "toy", "created": now})
    _folder(h / "products" / "tasks" / "tagger" / "t1", 3_000, {"kind": "tagger", "world": "toy", "created": now})
    _folder(h / "products" / "tasks" / "tagger-test" / "s1", 500,
            {"kind": "tagger-test", "inputs": {"tagger": "t1"}, "created": now})
    _folder(h / "products" / "init" / ".tmp-i3-0000", 50_000)  # a build in progress
    ft = h / "cache" / "methods" / "wechsel" / "fasttext"
    ft.mkdir(parents=True)
    (ft / "wechsel-words-abc.bin").write_bytes(b"\0" * 40_000)
    (ft / "wechsel-words-abc.json").write_text("{}")
    ft = h / "cache" / "methods" / "tiktotok" / "fasttext"  # a model in compact form, one being written
    ft.mkdir(parents=True)
    (ft / "tiktotok-deu-abc.npz").write_bytes(b"\0" * 30_000)
    (ft / "tiktotok-deu-abc.json").write_text("{}")
    (ft / ".tiktotok-fra-abc.1234abcd.npz").write_bytes(b"\0" * 20_000)
    ofa = h / "cache" / "methods" / "ofa"  # arrays cached with their lock (harness.core.cache.cached_arrays)
    ofa.mkdir(parents=True)
    (ofa / "subwords-abc.npz").write_bytes(b"\0" * 8_000)
    (ofa / "subwords-abc.npz.lock").write_text("")
    _folder(h / "cache" / "mappings" / "m1", 2_000)
    (h / "cache" / "boards").mkdir(parents=True)  # the boards' memo of intervals (leaderboard.stats.IntervalMemo)
    (h / "cache" / "boards" / "intervals.json").write_bytes(b"{}" + b" " * 998)
    _folder(h / "downloads" / "pypi", 70_000)
    (h / "mlflow.db").write_bytes(b"\0" * 5_000)
    _folder(h / "mlartifacts" / "1" / "run", 6_000)
    _folder(h / "leaderboards" / "toy", 1_000)
    return h


def _rows(items):
    from harness.cache_admin import summarize

    return {(r["kind"], r["world"]): (r["items"], r["bytes"]) for r in summarize(items)}


def test_du_sizes_each_kind_per_world(home):
    from harness.cache_admin import scan

    rows = _rows(scan(home))
    assert rows[("init", "toy")][0] == 1 and rows[("init", "toy")][1] > 100_000 and rows[("init", "0123456789abcdef")][1] > 110_000
    assert rows[("init", "-")][1] == 50_000  # the unfinished build, counted but never pruned
    assert rows[("cpt", "toy")][0] == 1 and rows[("tagger", "toy")][0] == 1
    assert rows[("tagger-test", "toy")][0] == 1  # the world of its tagger
    assert rows[("methods/wechsel", "-")] == (1, 40_000 + 2)  # the model and its .json are one item
    assert rows[("methods/tiktotok", "-")] == (2, 30_000 + 2 + 20_000)  # compact: the same; one busy
    assert rows[("methods/ofa", "-")] == (1, 8_000)  # the lock file goes with its arrays
    assert [i.extra for i in scan(home) if i.kind == "methods/ofa"] == [(home / "cache/methods/ofa/subwords-abc.npz.lock",)]
    busy = {i.path.name: i.busy for i in scan(home) if i.kind == "methods/tiktotok"}
    assert busy == {"tiktotok-deu-abc.npz": False, ".tiktotok-fra-abc.1234abcd.npz": True}
    assert rows[("world", "toy")][1] > 9_000
    assert rows[("tracking", "-")] == (2, 11_000)
    assert rows[("leaderboards", "toy")] == (1, 1_000)
    assert rows[("boards", "-")] == (1, 1_000) and not any(kind == "other" for kind, _ in rows)


def test_prune_never_removes_results_or_builds_in_progress(home, monkeypatch, capsys):
    from harness import cache_admin
    from harness.cli import build_parser

    monkeypatch.setenv("HARNESS_HOME", str(home))
    before = {p for p in home.rglob("*")}

    def cli(*argv):
        args = build_parser().parse_args(["cache", *argv])
        return args.func(args)

    assert cli("prune", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "would free" in out and "nothing removed" in out
    assert {p for p in home.rglob("*")} == before

    assert cli("prune", "--kind", "init", "--older-than", "7d") == 0
    assert "freed" in capsys.readouterr().out
    assert not (home / "products" / "init" / "i1").exists()
    assert (home / "products" / "init" / "i2").exists()  # younger than 7 days

    assert cli("prune", "--world", "toy") == 0
    assert not (home / "products" / "cpt" / "c1").exists()
    assert not (home / "products" / "tasks" / "tagger" / "t1").exists()
    assert not (home / "products" / "tasks" / "tagger-test" / "s1").exists()
    assert (home / "products" / "init" / "i2").exists()  # another world

    assert cli("prune") == 0
    out = capsys.readouterr().out
    for gone in ("products/init/i2", "cache/methods/wechsel/fasttext/wechsel-words-abc.bin",
                 "cache/methods/wechsel/fasttext/wechsel-words-abc.json", "cache/mappings/m1",
                 "cache/boards/intervals.json",
                 "cache/methods/tiktotok/fasttext/tiktotok-deu-abc.npz",
                 "cache/methods/tiktotok/fasttext/tiktotok-deu-abc.json"):
        assert not (home / gone).exists(), gone
    # the runs' results, the world, its downloads and the build in progress stay
    for kept in ("mlflow.db", "mlartifacts/1/run/weights.bin", "leaderboards/toy", "worlds/toy-v1",
                 "downloads/pypi", "products/init/.tmp-i3-0000",
                 "cache/methods/tiktotok/fasttext/.tiktotok-fra-abc.1234abcd.npz"):
        assert (home / kept).exists(), kept
    assert cache_admin.parse_age("1h") == 3600 and cache_admin.parse_age("2w") == 14 * DAY

    assert cli("prune", "--kind", "downloads,world") == 0
    assert not (home / "downloads" / "pypi").exists() and not (home / "worlds" / "toy-v1").exists()
    assert (home / "mlflow.db").exists()


def test_prune_refuses_results_and_unknown_kinds(home, monkeypatch, run_cli):
    r = run_cli("cache", "prune", "--kind", "tracking", env={"HARNESS_HOME": str(home)})
    assert r.returncode == 2 and "never pruned" in r.stderr
    r = run_cli("cache", "prune", "--kind", "inti", env={"HARNESS_HOME": str(home)})
    assert r.returncode == 2 and "unknown kind" in r.stderr
    r = run_cli("cache", "prune", "--older-than", "soon", env={"HARNESS_HOME": str(home)})
    assert r.returncode == 2 and "--older-than" in r.stderr
    r = run_cli("cache", "du", env={"HARNESS_HOME": str(home)})
    assert r.returncode == 0 and "methods/wechsel" in r.stdout and "tracking" in r.stdout
    assert (home / "mlflow.db").exists() and (home / "products" / "init" / "i1").exists()


def test_prune_finished_takes_only_the_products_of_finished_cells(tmp_path, monkeypatch, capsys):
    """Init and CPT products are tied to their cell (the hash of the init inputs, profile and CPT settings); only
    those whose cell's MLflow run FINISHED go, and with them the cell's tagger records."""
    import sqlite3

    from harness.cli import build_parser
    from harness.core.hashing import hash_obj

    h = tmp_path / "home"
    settings = {"steps": 10, "lr": 1e-4, "devices": 1}
    cpt = {k: v for k, v in settings.items() if k != "devices"}
    con = sqlite3.connect(_mkdir(h) / "mlflow.db")
    con.execute("CREATE TABLE runs (run_uuid TEXT, status TEXT)")
    con.execute("CREATE TABLE tags (key TEXT, value TEXT, run_uuid TEXT)")
    for n, (method, status) in enumerate((("done", "FINISHED"), ("busy", "RUNNING"))):
        inputs = {"world": "w", "source": "s", "method": method, "params": {}, "dim": None, "seed": 1,
                  "init_version": 2}
        _folder(h / "products" / "init" / f"init-{method}", 1000, {"kind": "init", "inputs": inputs})
        cpt_key = hash_obj({"init": f"init-{method}", "cpt": cpt, "seed": 1})
        _folder(h / "products" / "cpt" / cpt_key, 2000, {"kind": "cpt", "settings": settings, "seed": 1})
        cell = hash_obj({**inputs, "profile": "cpu", "cpt": cpt})
        _folder(h / "products" / "tasks" / "tagger" / f"tagger-{method}", 10,
                {"kind": "tagger", "inputs": {"model": f"{cell}:0"}})
        run = f"run{n}"
        con.execute("INSERT INTO runs VALUES (?, ?)", (run, status))
        con.executemany("INSERT INTO tags VALUES (?, ?, ?)", [("harness.cell", cell, run), ("harness.kind", "cell", run),
                                                             ("harness.profile", "cpu", run),
                                                             ("harness.world", "toy", run)])
    con.commit()
    con.close()
    monkeypatch.setenv("HARNESS_HOME", str(h))
    args = build_parser().parse_args(["cache", "prune", "--finished"])
    assert args.func(args) == 0
    assert "freed" in capsys.readouterr().out
    remaining = {p.name for kind in ("init", "cpt", "tasks/tagger") for p in (h / "products" / kind).iterdir()}
    assert remaining == {"init-busy", hash_obj({"init": "init-busy", "cpt": cpt, "seed": 1}), "tagger-busy"}
    assert (h / "mlflow.db").is_file()


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


# -- a world's build inputs ----------------------------------------------------------------------------------
class _ToyBuilder:
    name = "toy"
    version = 1
    build_inputs = ("downloads", "build-envs")

    def build(self, out):
        (out / "manifest.json").write_text(json.dumps({"name": "toy", "version": 1}))
        (out / "languages.json").write_text("{}")


@pytest.fixture
def toy_home(tmp_path, monkeypatch):
    """A fresh harness home in which the world ``toy`` is built by :class:`_ToyBuilder`."""
    from harness import worlds

    home = tmp_path / "home"
    monkeypatch.setenv("HARNESS_HOME", str(home))
    real_get = worlds.WORLDS.get
    monkeypatch.setattr(worlds.WORLDS, "get", lambda name: _ToyBuilder() if name == "toy" else real_get(name))
    return home


@pytest.mark.parametrize("case", ["removed", "kept-by-flag", "kept-while-another-build-runs"])
def test_a_world_build_removes_its_downloads_and_build_envs(toy_home, case):
    """Once the world is in place, what its build fetched and installed goes (a later build fetches it again);
    the world stays, and so does everything when asked to keep it or while another build may be reading it."""
    from harness import worlds

    home = toy_home
    _folder(home / "downloads" / "pypi", 5_000)
    _folder(home / "build-envs" / "spacy-1", 3_000)
    _folder(home / "inputs" / "glot500", 1_000)  # a user's inputs: never a build input
    if case == "kept-while-another-build-runs":
        (home / "worlds" / ".tmp-other-v1-0000").mkdir(parents=True)
    root = worlds.build_world("toy", keep_inputs=case == "kept-by-flag")
    assert (root / "manifest.json").is_file() and (home / "inputs" / "glot500").is_dir()
    gone = case == "removed"
    assert (home / "downloads").exists() != gone and (home / "build-envs").exists() != gone


def test_a_world_build_removes_what_a_killed_build_of_it_left(toy_home):
    """A build killed by SIGKILL leaves its ``.tmp-<world>-*`` folder; the next build of that world (under the
    world's lock, so no live build owns it) removes it; another world's build folder is left alone. The lock file
    is listed with the world."""
    from harness import worlds
    from harness.cache_admin import scan

    home = toy_home
    _folder(home / "worlds" / ".tmp-toy-v1-dead0000", 4_000)
    _folder(home / "worlds" / ".tmp-other-v1-0000", 1_000)
    root = worlds.build_world("toy", keep_inputs=True)
    assert (root / "manifest.json").is_file()
    assert sorted(p.name for p in (home / "worlds").iterdir()) == [".tmp-other-v1-0000", "toy-v1", "toy-v1.lock"]
    toy = [i for i in scan(home) if i.kind == "world" and i.path.name == "toy-v1"]
    assert len(toy) == 1 and toy[0].extra == (home / "worlds" / "toy-v1.lock",)
    assert not any(i.path.name.endswith(".lock") for i in scan(home))


def test_cell_products_are_the_cells_complete_init_and_cpt_products(home):
    """What the runner removes once a cell's run finished: its init and CPT products (with what a distributed CPT
    left beside the latter), never another product, nothing unfinished, nothing absent."""
    from harness.cache_admin import cell_products, remove

    _folder(home / "products" / "cpt" / "c1.launch", 10)
    (home / "products" / "init" / "i1.lock").write_text("")  # its build lock (harness.core.locks)
    _folder(home / "products" / "cpt" / "c2", 20)  # no marker: unfinished
    assert cell_products(home, "nothing", None) == []
    assert cell_products(home, "i3", "c2") == []
    items = cell_products(home, "i1", "c1")
    assert [(i.kind, i.path.name) for i in items] == [("init", "i1"), ("cpt", "c1")]
    assert items[0].extra == (home / "products" / "init" / "i1.lock",)
    assert items[1].extra == (home / "products" / "cpt" / "c1.launch",)
    freed = remove(items, home)
    assert freed == sum(i.bytes for i in items) and freed > 300_000
    left = {p.name for kind in ("init", "cpt") for p in (home / "products" / kind).iterdir()}
    assert left == {"i2", ".tmp-i3-0000", "c2"}
