"""A method's code is part of what a cell ran: a finished cell whose method was edited since is named as stale,
with the files that changed and the flag that refreshes it, and ``--rerun stale`` runs it again with the new code
(its init product is keyed by the code too, so nothing of the old code is reused)."""

from __future__ import annotations

import os
import sqlite3
import textwrap

from tests.conftest import REPO

PLUGIN = textwrap.dedent('''
    import numpy as np

    from methods.base import InitContext, InitResult, Provenance


    class MeanInit:
        """Copy the overlap; every other token gets the mean source row, times SCALE."""

        name = "mean-plugin"
        description = "copy overlap, the scaled mean source row for every other token"
        requires = frozenset()
        overlap_rule = "ofa"
        supports_factorized = True
        SCALE = {scale}

        def initialize(self, ctx: InitContext) -> InitResult:
            mapping = ctx.mapping_for(self.overlap_rule)
            source = ctx.source_matrix
            target = source.mean(dim=0, keepdim=True).repeat(mapping.target_size, 1) * self.SCALE
            provenance = np.full(mapping.target_size, Provenance.METHOD.value)
            for t, s in mapping.copy.items():
                target[t] = source[s]
                provenance[t] = Provenance.COPIED.value
            return InitResult(matrix=target, provenance=provenance, copy=dict(mapping.copy))
''')


def _plugin(site, scale: float) -> None:
    (site / "mean_plugin.py").write_text(PLUGIN.format(scale=scale))
    dist = site / "mean_plugin-0.1.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mean-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[harness.methods]\nmean-plugin = mean_plugin:MeanInit\n")


def _mlm_loss(db, experiment: str) -> list[float]:
    with sqlite3.connect(db) as con:
        return [v for (v,) in con.execute(
            "SELECT m.value FROM metrics m JOIN runs r ON r.run_uuid = m.run_uuid JOIN experiments e ON "
            "e.experiment_id = r.experiment_id WHERE e.name = ? AND m.key = 'mlm/loss/avg' AND "
            "r.lifecycle_stage = 'active' AND r.run_uuid IN (SELECT run_uuid FROM tags WHERE key = 'harness.kind' "
            "AND value = 'task')", (experiment,))]


def test_an_edited_method_is_named_stale_and_rerun_stale_refreshes_it(run_cli, harness_home, synthetic_world,
                                                                      tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _plugin(site, 1.0)
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    job = ["run", "--world", "synthetic", "--methods", "mean-plugin", "--tasks", "mlm", "--cpt-steps", "0",
           "--experiment", "t-code", "--workers", "1"]
    db = harness_home / "mlflow-tests.db"
    first = run_cli(*job, env=env, check=True)
    assert "stale" not in first.stderr
    before = _mlm_loss(db, "t-code")
    assert len(before) == 1

    again = run_cli(*job, env=env, check=True)  # the same code: passed over, nothing said
    assert "finished, every evaluation logged" in again.stderr and "stale" not in again.stderr
    assert "mean-plugin d=full" in again.stdout and "[older code]" not in again.stdout
    assert "[earlier run]" not in again.stdout  # the command's own cell, passed over

    _plugin(site, 0.5)  # the researcher edits the method
    edited = run_cli(*job, env=env, check=True)
    assert "older version of their method's code" in edited.stderr
    assert "mean_plugin.py changed since" in edited.stderr and "--rerun stale" in edited.stderr
    assert _mlm_loss(db, "t-code") == before  # named, not silently replaced
    # stdout marks the row too, and says which files changed (the cell is this command's: not an earlier run)
    assert "mean-plugin d=full [older code]" in edited.stdout and "[earlier run]" not in edited.stdout
    assert "[older code]: computed by an older version of the method's code (mean-plugin: mean_plugin.py " \
           "changed since)" in edited.stdout

    refreshed = run_cli(*job, "--rerun", "stale", env=env, check=True)
    assert "starts over (--rerun stale)" in refreshed.stderr  # lines are never wrapped when piped
    after = _mlm_loss(db, "t-code")
    assert len(after) == 1 and after != before  # the new code's numbers, in the cell's one run
    assert "mean-plugin d=full" in refreshed.stdout and "[older code]" not in refreshed.stdout

    settled = run_cli(*job, "--rerun", "stale", env=env, check=True)  # nothing stale is left
    assert "starts over" not in settled.stderr and _mlm_loss(db, "t-code") == after


def test_code_digest_follows_the_package_imports():
    from harness.core.declarations import code_digest

    files = code_digest("methods.ofa")
    assert {"methods/ofa.py", "methods/combine.py", "methods/subwords.py", "methods/base.py"} <= set(files)
    assert "methods/focus.py" not in files  # another method's module is not OFA's code
    assert all(len(d) == 12 for d in files.values())
