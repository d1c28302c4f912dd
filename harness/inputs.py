"""The account of a cell's inputs: every value a cell's numbers can depend on, and where it is accounted for.

A cell (source model, method, factorized dim, seed) under a resolved run (:class:`harness.spec.RunSpec`) is found
again in MLflow by its key, the hash of its identity (:func:`harness.spec.cell_identity`), and skipped when its run
is FINISHED with every evaluation the command asks for (:func:`harness.cell.finished_cell_run`). An input that
moves a number but is in neither would let a run print numbers computed without it. So every input is listed here,
once, in one category:

- :data:`KEY`: in the cell's identity (``where`` names the identity field: ``seed``, ``cpt.lr``), or, where
  ``where`` starts with ``init:``, in its init product's key only (:func:`harness.spec.init_inputs`);
- :data:`COVERAGE`: in what a finished evaluation covers (``where``: ``languages``, ``steps`` or ``tasks``); a
  finished cell that covers less than the command asks for runs again, and finds what it logged before;
- :data:`INERT`: moves no number (``why`` says why, in one line);
- :data:`DERIVED`: a composite whose parts are entries of their own (``where`` names them);
- :data:`GAP`: moves numbers and is in none of the above today (``why`` says what it moves and the fix proposed).

The names: a run setting by its :class:`harness.config.RunConfig` field, which is also its config-file key and,
dashed, its ``harness run`` flag (``langs``: ``--langs``, ``langs = [...]``); a ``[cpt]`` table key as ``cpt.<key>``;
a flag that is no setting as itself (``--debug``); a field of the resolved run as ``spec.<field>``; an environment
variable as ``env:<NAME>`` (a family of them by its prefix, ``env:MKL_*``); the world's, sources' and target's
identities as ``identity:<what>``; the code and the libraries as ``code:<what>``.

``tests/test_input_account.py`` enumerates the inputs from the code itself (RunConfig's fields, the options of
``harness run``, the ``[cpt]`` keys the run accepts, RunSpec's fields, the environment variables the harness, the
methods, the tasks and the leaderboard read) and fails on one that is not here; for every :data:`KEY` input a
property test changes it and checks that the key it names changes; the set of :data:`GAP` entries is pinned there,
so a new gap is a visible change. To add an input: add its entry below, in its category (docs/architecture.md,
"Every input of a cell, accounted").
"""

from __future__ import annotations

from dataclasses import dataclass

KEY = "key"
COVERAGE = "coverage"
INERT = "inert"
DERIVED = "derived"
GAP = "gap"
CATEGORIES = (KEY, COVERAGE, INERT, DERIVED, GAP)
COVERAGE_FIELDS = ("languages", "steps", "tasks")  # what a finished evaluation covers


@dataclass(frozen=True)
class Input:
    """One input of a cell: its ``name``, its ``category``, ``where`` it is carried (the identity field of a
    :data:`KEY` input, ``init:<field>`` for the init product's key alone; the coverage field of a :data:`COVERAGE`
    input; the parts of a :data:`DERIVED` one) and ``why`` (one line)."""

    name: str
    category: str
    where: str
    why: str


def _key(name: str, where: str, why: str) -> Input:
    return Input(name, KEY, where, why)


def _covers(name: str, where: str, why: str) -> Input:
    return Input(name, COVERAGE, where, why)


def _inert(name: str, why: str) -> Input:
    return Input(name, INERT, "", why)


# -- the run's settings (harness.config.RunConfig: the config-file keys, and the flags of harness run) -----------
SETTINGS = (
    _key("methods", "method", "each cell is one method"),
    _covers("tasks", "tasks", "a finished cell is skipped only with every task of the command logged (the held-out "
                              "curve is the diagnostic's own wherever the MLM task would compute it otherwise)"),
    _key("world", "world", "the world's hash (its name picks the experiment, <world>/<source>)"),
    _key("source", "source", "each cell is one source model"),
    _covers("langs", "languages", "the languages each task scores: an evaluation covers those it was asked for "
                              "(harness.langs.step_<step>); the held-out diagnostic is over every language"),
    _key("dims", "dim", "each cell is one factorized dimension"),
    _key("seeds", "seed", "each cell is one seed"),
    _key("cpt_steps", "cpt.steps", "the CPT budget (its schedule decays over it); also the evaluated steps"),
    _key("cpt_checkpoints", "cpt.checkpoints", "in the CPT settings of the identity; also the evaluated steps"),
    _key("profile", "profile", "its name; its CPT and method settings also enter the identity as resolved"),
    _key("device", "accelerator", "the accelerator whose branches a cell takes (cuda, mps; emulated on a CPU), "
                                  "absent on a plain CPU; its resolved precision is keyed as precision"),
    _key("precision", "eval_precision", "resolved: the evaluation precision (away from fp32) and cpt.precision"),
    _inert("tracking_uri", "where the runs are logged: a cell is looked for in that store and computed in it"),
    _inert("experiment", "where a cell is looked for: another experiment holds no cell of this one, so it is "
                         "computed there"),
    _key("method_params", "params", "the method's parameters, merged over the profile's"),
    _key("task_params", "task_params", "the tasks' protocol a run gives (none given: absent)"),
    Input("cpt", DERIVED, "cpt.*", "the [cpt] table: each of its keys is an entry"),
    _inert("fail_fast", "stops the run at the first failed cell; computes nothing otherwise"),
    _inert("rerun", "which logged cells start over (the resume policy): they compute the same numbers"),
    _inert("keep_products", "whether a finished cell's products stay on disk: built again, they are the same"),
    _inert("executor", "where a cell runs (local, ray): the kernels are measured where it runs and must match"),
    _inert("ray_address", "which Ray cluster runs the cells"),
    _inert("max_retries", "how often Ray retries a cell whose worker died; a retry resumes the same cell"),
    _key("workers", "threads", "cells side by side share the cores: where a cell gets fewer threads than "
                                 "its profile's CPUs (harness.spec.cell_threads), the count is keyed"),
    _inert("isolate_cells", "whether each cell runs in a fresh process of its own"),
)

# -- the flags of harness run that are no setting -------------------------------------------------------------
FLAGS = (
    _inert("--config", "the file's keys are settings, each accounted under its own name"),
    _inert("--cpt-devices", "sets cpt.devices (inert: the effective batch is the same on any number of devices)"),
    _inert("--help", "prints the help"),
    _inert("--version", "prints the versions"),
    _inert("--verbose", "more log lines"),
    _inert("--debug", "the full traceback of an error"),
)

# -- the keys of the [cpt] table (harness.spec.cpt_settings) --------------------------------------------------
CPT = (
    _key("cpt.steps", "cpt.steps", "the CPT budget; also the evaluated steps"),
    _key("cpt.lr", "cpt.lr", "the learning rate"),
    _key("cpt.effective_batch", "cpt.effective_batch", "sequences per optimizer step"),
    _key("cpt.per_device_batch", "cpt.per_device_batch", "the micro-batch (accumulation order)"),
    _key("cpt.block_size", "cpt.block_size", "tokens per block, as fitted to the source model"),
    _key("cpt.mlm_probability", "cpt.mlm_probability", "the masking rate"),
    _key("cpt.warmup_steps", "cpt.warmup_steps", "the schedule's warmup"),
    _key("cpt.weight_decay", "cpt.weight_decay", "AdamW's weight decay"),
    _key("cpt.checkpoints", "cpt.checkpoints", "the extra evaluated steps, in the CPT settings of the identity"),
    _key("cpt.max_sentences_per_language", "cpt.max_sentences_per_language", "the CPT corpus' cap"),
    _key("cpt.precision", "cpt.precision", "CPT's precision, resolved"),
    _key("cpt.save_every", "cpt.save_every", "Trainer checkpoints (resume points), in the CPT settings"),
    _key("cpt.language_sampling", "cpt.language_sampling", "the order in which languages' blocks are drawn"),
    _key("cpt.sampling_alpha", "cpt.sampling_alpha", "the smoothed sampling's exponent"),
    _inert("cpt.devices", "processes one cell's CPT spans; the effective batch is the same on any number"),
    _covers("cpt.eval_tasks", "steps", "whether the tasks are evaluated after CPT: the steps a finished cell must "
                                       "have logged (CptSpec.task_steps)"),
    _inert("cpt.auto_batch", "whether the micro-batch is searched; the effective batch is kept"),
)

# -- the resolved run (harness.spec.RunSpec) -----------------------------------------------------------------
SPEC = (
    Input("spec.cfg", DERIVED, "RunConfig", "the settings as given: each field is an entry of SETTINGS"),
    _key("spec.world", "world", "the world's name; the world's hash is the identity's"),
    _key("spec.world_hash", "world", "the hash of the world's manifest (harness.worlds.base.world_identity)"),
    _key("spec.device", "accelerator", "as the device setting"),
    _key("spec.eval_precision", "eval_precision", "resolved; absent from the identity at fp32"),
    _key("spec.cpu_kernels", "cpu_kernels", "the measured label of the CPU kernels (harness.core.kernels)"),
    Input("spec.cpt", DERIVED, "cpt.*", "the resolved CPT settings: each key is an entry; the product's are keyed"),
    _key("spec.fitted", "cpt.block_size", "a setting clamped to the source model: the clamped value is keyed"),
    Input("spec.plan", DERIVED, "methods, source, dims, seeds, tasks, langs",
          "the cells (method, source, dim, seed), the tasks and each task's languages"),
    _inert("spec.heldout_languages", "every language of the MLM task, whatever --langs says: a function of the "
                                          "world, which is keyed"),
    _key("spec.method_params", "params", "each method's resolved parameters"),
    _key("spec.method_code", "init:code", "the digest of each method's code keys its init product; a finished "
                                          "cell of other code is named stale (--rerun stale runs it again)"),
    _key("spec.eval_max_sentences", "profile", "the profile's cap on the sentences a task scores"),
    _key("spec.heldout_max_sentences", "profile", "the profile's cap on the held-out diagnostic's sentences"),
    _inert("spec.cpt_devices", "as cpt.devices"),
    _key("spec.threads", "threads", "the torch threads every cell computes with: keyed where fewer than the "
                                    "profile's CPUs (as workers)"),
    _key("spec.cpus_per_cell", "profile", "the profile's CPUs per cell (the threads a cell asks for: see workers)"),
    Input("spec.cells", DERIVED, "spec.plan", "each cell's identity, key and products' keys, computed from the rest"),
    _inert("spec.executor", "as executor, workers and isolate_cells"),
)

# -- environment variables (read by the harness, the methods, the tasks, the leaderboard, or the kernels) -------
_KERNELS = "in the measured kernel label (harness.core.kernels: a fingerprint of the kernels a cell computes with)"
ENV = (
    _inert("env:HARNESS_HOME", "where the products, the worlds and the default store live"),
    _inert("env:MLFLOW_TRACKING_URI", "as tracking_uri"),
    _key("env:HARNESS_CPU_KERNELS", "cpu_kernels", "avx2 (pinned) or native: " + _KERNELS),
    _key("env:HARNESS_CPU_KERNELS_PINNED", "cpu_kernels", "whether a parent pinned the kernels: " + _KERNELS),
    _inert("env:HARNESS_CPU_KERNELS_TAKEN", "labels taken from the record: a cell measuring another refuses to run"),
    _key("env:MKL_*", "cpu_kernels", "MKL's kernels (MKL_CBWR): " + _KERNELS + "; its threads' variables "
                                     "(MKL_NUM_THREADS, and OPENBLAS_NUM_THREADS) count as OMP_NUM_THREADS"),
    _key("env:ATEN_*", "cpu_kernels", "ATen's kernels (ATEN_CPU_CAPABILITY): " + _KERNELS),
    _key("env:OPENBLAS_*", "cpu_kernels", "OpenBLAS' kernels (OPENBLAS_CORETYPE): " + _KERNELS),
    _key("env:ONEDNN_*", "cpu_kernels", "oneDNN's kernels (ONEDNN_MAX_CPU_ISA): " + _KERNELS),
    _key("env:DNNL_*", "cpu_kernels", "oneDNN's kernels: " + _KERNELS),
    _key("env:GOTO*", "cpu_kernels", "OpenBLAS' kernels: " + _KERNELS),
    _inert("env:KMP_*", "Intel OpenMP's affinity and scheduling: torch splits a sum by its thread count alone"),
    _inert("env:GOMP_*", "GNU OpenMP's, as KMP_*"),
    _key("env:LD_PRELOAD", "cpu_kernels", "another library loaded: " + _KERNELS),
    _key("env:LD_LIBRARY_PATH", "cpu_kernels", "another library found: " + _KERNELS),
    _key("env:DYLD_LIBRARY_PATH", "cpu_kernels", "another library found: " + _KERNELS),
    _key("env:OMP_NUM_THREADS", "threads", "the harness process held to fewer threads than the profile's "
                                               "CPUs a cell: the cells compute with that many, keyed"),
    _inert("env:OMP_*", "OpenMP's other settings (affinity, scheduling), as KMP_*"),
    _key("env:HARNESS_EMULATE_ACCELERATOR", "accelerator", "the accelerator's branches taken on a CPU: "
                                                          "keyed as the accelerator 'emulated'"),
    _inert("env:HARNESS_EMULATE_GPUS", "how many GPUs the emulation counts: cells side by side"),
    _inert("env:CUDA_VISIBLE_DEVICES", "which of the node's GPUs a cell computes on (their kind: see device)"),
    _inert("env:HARNESS_PINNED_GPUS", "the GPUs a cell process was pinned to, as CUDA_VISIBLE_DEVICES"),
    _inert("env:LOCAL_RANK", "torchrun's rank of a CPT across cpt.devices processes (set by the harness)"),
    _inert("env:RANK", "torchrun's rank (set by the harness): rank 0 writes"),
    _inert("env:WORLD_SIZE", "torchrun's number of processes, as cpt.devices"),
    _inert("env:HARNESS_CPU_FLAGS", "the CPU flags a test makes the CPU report: informative only, no default "
                                    "depends on them (auto is fp32 on every CPU)"),
    _inert("env:HARNESS_CORPUS_WORKERS", "processes that tokenize a CPT corpus: its bytes are the same"),
    _key("env:HARNESS_GLOT500_SPEC", "world", "the glot500 world's spec: its hash is in the world's version, so "
                                              "in the manifest"),
    _inert("env:HF_HOME", "where the glot500 build looks for hub files; what it takes is checksummed in the world"),
    _inert("env:HF_HUB_CACHE", "as HF_HOME"),
    _inert("env:XDG_CACHE_HOME", "as HF_HOME"),
    _inert("env:HF_HUB_OFFLINE", "nothing loads from a hub at run time; a world's files are checksummed"),
    _inert("env:HF_DATASETS_OFFLINE", "as HF_HUB_OFFLINE"),
    _inert("env:HF_HUB_DISABLE_PROGRESS_BARS", "display"),
    _inert("env:TRANSFORMERS_NO_ADVISORY_WARNINGS", "display"),
    _inert("env:TOKENIZERS_PARALLELISM", "the tokenizers' threads: the same ids"),
    _inert("env:MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "the MLflow UI's server"),
    _inert("env:MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "display"),
    _inert("env:MLFLOW_LOGGING_LEVEL", "display"),
    _inert("env:MLFLOW_ENABLE_WORKSPACES", "how the store is read (the harness's SQLite view is off with them)"),
    _inert("env:HARNESS_STORE_VIEW", "how the store is read (0: through MLflow's client): the same runs"),
    _inert("env:HARNESS_STORE_WAIT", "how long a locked store is waited for"),
    _inert("env:HARNESS_PROGRESS", "display (bars or lines)"),
    _inert("env:HARNESS_PROGRESS_INTERVAL", "display (how often a line is said)"),
    _inert("env:COLUMNS", "display (table width)"),
    _inert("env:RAY_AUTH_MODE", "a private Ray instance's authentication"),
    _inert("env:HARNESS_MAIN_PID", "the process the workers live and die with"),
    Input("env:PYTHONPATH", DERIVED, "code:method, code:tasks, code:harness, code:libraries",
          "which code is imported (handed to the workers): what that code computes is accounted as code"),
    _inert("env:HARNESS_FAULT_AFTER", "tests only: a fault injected into a stage fails or kills the cell"),
    _inert("env:HARNESS_FAULT_AT", "tests only: as HARNESS_FAULT_AFTER"),
    _inert("env:HARNESS_FAULT_DEVICE", "tests only: as HARNESS_FAULT_AFTER"),
    _inert("env:HARNESS_FAULT_MARKER", "tests only: as HARNESS_FAULT_AFTER"),
    _inert("env:HARNESS_FAULT_SIGNAL", "tests only: as HARNESS_FAULT_AFTER"),
    _inert("env:HARNESS_SIMULATED_MEMORY", "tests only: a memory limit, which can move the micro-batch only, as "
                                           "cpt.auto_batch"),
)

# -- identities and code --------------------------------------------------------------------------------------
IDENTITIES = (
    _key("identity:world", "world", "the hash of the world's manifest: its inputs, languages, tasks, sources"),
    _key("identity:source", "source_identity", "a source with its own identity (a decoder) carries its "
                                               "manifest entry's hash; any other source is in the world's hash"),
    _key("identity:target", "world", "the target tokenizer is built with the world, from its manifest's inputs"),
)
CODE = (
    _key("code:method", "init:code", "as spec.method_code"),
    _key("code:INIT_VERSION", "init_version", "bumped when the initialization path changes its output"),
    _key("code:tasks", "eval_version", "a task's code and protocol defaults: EVAL_VERSION (harness.spec) is bumped "
                                       "when they change a number, as INIT_VERSION; the taggers' cache has its own"),
    _key("code:harness", "cpt_version", "CPT's code (and the surgery it trains): CPT_VERSION (harness.spec), bumped "
                                        "when it changes a number; evaluation code and a profile's caps: "
                                        "EVAL_VERSION"),
    _key("code:libraries", "init:code", "the versions of torch, transformers, tokenizers, fasttext and numpy are "
                                        "recorded with the method's code (harness.spec.library_code): they key "
                                        "its init product, and a finished cell of other versions is named stale"),
)

ACCOUNT: dict[str, Input] = {}
for _entry in (*SETTINGS, *FLAGS, *CPT, *SPEC, *ENV, *IDENTITIES, *CODE):
    assert _entry.name not in ACCOUNT, f"{_entry.name} accounted twice"
    assert _entry.category in CATEGORIES, _entry
    assert _entry.category != COVERAGE or _entry.where in COVERAGE_FIELDS, _entry
    ACCOUNT[_entry.name] = _entry


def entry(name: str) -> Input | None:
    """The account's entry ``name``; for ``env:<NAME>``, the variable's own entry, else its family's
    (``env:MKL_*``, the longest prefix that matches); None where the account has none."""
    if name in ACCOUNT:
        return ACCOUNT[name]
    if not name.startswith("env:"):
        return None
    families = [n for n in ACCOUNT if n.endswith("*") and name.startswith(n[:-1])]
    return ACCOUNT[max(families, key=len)] if families else None


def of(category: str) -> list[Input]:
    """The entries of ``category``, in the account's order."""
    return [e for e in ACCOUNT.values() if e.category == category]
