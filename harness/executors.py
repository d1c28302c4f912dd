"""Executors: where the cells of a run execute.

* ``local`` (default): on this machine; one cell after the other in this process, or with ``workers`` > 1 that
  many cells side by side, each in its own process with its share of the cores (the default on a CPU: cores /
  the profile's CPUs per cell, so the ``cpu`` profile runs two cells at once on 2 cores). Two single-threaded
  cells beat one two-threaded cell there: torch's passes scale ~1.6x from 1 to 2 threads, and the single-threaded
  stages (fastText training, tokenization, logging) of one cell overlap the other's.
* ``ray``: each cell is a Ray task asking for the CPUs and GPUs its profile needs, on a local Ray instance bound to
  127.0.0.1 or on an existing cluster (``--ray-address auto`` or ``ray://host:port``). Workers share the products
  through ``HARNESS_HOME`` (a shared filesystem on a cluster) and log to one MLflow tracking URI (a tracking server on
  a cluster; a local sqlite file on one machine). A cell whose worker dies (a crash, an out-of-memory kill, a
  preempted node) is retried by Ray; since cells are idempotent, the retry finds the finished products and the MLflow
  runs of the killed attempt and continues them, logging no duplicate. An exception raised by the harness's own code
  is deterministic and is not retried: it marks the cell's run FAILED, as with the local executor.

Nothing here schedules work itself: the grid is handed to Ray, CPT across GPUs to torchrun/accelerate.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from typing import Any

from harness.core.devices import SlotLease, accelerator_branches, gpu_names, gpu_slots, pin
from harness.core.errors import ConfigError
from harness.core.hosts import available_cpus

_ENV_KEYS = ("HARNESS_HOME", "MLFLOW_TRACKING_URI", "HF_HOME", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
             "HARNESS_FAULT_AFTER", "HARNESS_FAULT_MARKER", "HARNESS_FAULT_DEVICE", "HARNESS_FAULT_AT", "HARNESS_FAULT_SIGNAL",
             "HARNESS_MAIN_PID", "TOKENIZERS_PARALLELISM", "PYTHONPATH", "HARNESS_EMULATE_ACCELERATOR",
             "HARNESS_EMULATE_GPUS", "HARNESS_SIMULATED_MEMORY",
             # the CPU kernels (harness.core.kernels): a Ray worker loads numpy before the harness can pin them
             "HARNESS_CPU_KERNELS", "HARNESS_CPU_KERNELS_TAKEN", "MKL_CBWR", "ATEN_CPU_CAPABILITY", "OPENBLAS_CORETYPE", "ONEDNN_MAX_CPU_ISA",
             "HARNESS_CPU_KERNELS_PINNED")


def _worker_env(tracking_uri: str) -> dict[str, str]:
    from harness.core.paths import harness_home

    env = {k: os.environ[k] for k in _ENV_KEYS if k in os.environ}
    env["HARNESS_HOME"] = str(harness_home())
    env["MLFLOW_TRACKING_URI"] = tracking_uri
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    return env


_RUNNERS: dict[str, Any] = {}  # a worker process's runner per run, built for its first cell


def _worker_runner(spec: Any) -> Any:
    """The runner a worker process runs its cells with: built once per process and run (the world loaded, the
    MLflow store opened), not once per cell. The run's settings come resolved (:class:`harness.spec.RunSpec`)."""
    import json

    from harness.config import config_to_dict

    key = json.dumps(config_to_dict(spec.cfg), sort_keys=True, default=str)
    if key not in _RUNNERS:
        from harness.runner import Runner
        from harness.worlds import get_world

        _RUNNERS[key] = Runner(spec, get_world(spec.world, build=False))
    return _RUNNERS[key]


def _run_cell_in_worker(spec: Any, cell: Any, num_cpus: float, label_lines: bool = False) -> dict[str, Any]:
    """Body of a worker's task: run one cell (idempotent) with the process's runner."""
    import sys

    from harness.core import faults
    from harness.core.progress import STARTUP_HEARTBEAT_S, set_prefix, stage

    faults.install()  # a Ray worker starts no initializer of ours: the tests' faults, where asked for (idempotent)
    # cells side by side: say whose line each is (the lines of the runner's start-up in this process too)
    prefix = f"[{cell.method}{'' if cell.dim is None else f'/{cell.dim}'}/s{cell.seed}] " if label_lines else ""
    set_prefix(prefix)
    if "torch" not in sys.modules:  # the process's first cell: seconds before the runner says anything
        with stage("worker process: importing torch", heartbeat=STARTUP_HEARTBEAT_S):
            import torch
    import torch

    torch.set_num_threads(max(1, int(num_cpus)))
    runner = _worker_runner(spec)
    runner.prefix = prefix
    return runner.run_cell(cell)


@dataclasses.dataclass(frozen=True)
class ExecutorChoice:
    """Where a run's cells execute, decided once with the run's settings (:func:`choose`)."""

    backend: str  # local or ray
    device: str  # the device the parent sees (a pinned process: cuda)
    workers: int  # cells side by side at most (local)
    isolate: bool  # each cell in a fresh process of its own (local)
    slots: tuple[str, ...]  # the GPU groups cells are pinned to, one cell process each (local, accelerator)
    cpt_devices: int

    def workers_for(self, n_cells: int) -> int:
        return max(1, min(self.workers, n_cells))


def choose(cfg: Any, device: str, cpt_devices: int, cpus_per_cell: int) -> ExecutorChoice:
    """Where the cells run: ``cfg.executor``; locally, ``cfg.workers`` cells at once if set, else on a CPU the
    cores divided by the CPUs the profile gives a cell (at least 1), and on an accelerator one cell per group of
    ``cpt_devices`` GPUs (:func:`harness.core.devices.gpu_slots`: every GPU of the node, or the one ``cuda:N``
    names); each in a fresh process where :func:`isolate_cells` says."""
    slots = tuple(gpu_slots(device, cpt_devices))
    if cfg.workers is not None:  # checked (>= 1) with the run's settings: harness.config
        workers = int(cfg.workers)
    elif accelerator_branches(device):
        workers = len(slots) or 1
    else:
        workers = max(1, available_cpus() // max(1, cpus_per_cell))
    return ExecutorChoice(backend=cfg.executor, device=device, workers=workers, isolate=isolate_cells(cfg, device),
                          slots=slots, cpt_devices=cpt_devices)


def isolate_cells(cfg: Any, device: str) -> bool:
    """Whether each cell runs in a fresh process of its own: ``cfg.isolate_cells`` if set; otherwise on an
    accelerator (a device-side assert or another CUDA fault leaves the process's CUDA context unusable, and every
    later cell of that process would fail with it), not on a CPU (where starting a process per cell only costs)."""
    if cfg.isolate_cells is not None:
        return bool(cfg.isolate_cells)
    return accelerator_branches(device)


def make_executor(spec: Any, n_cells: int) -> Any:
    """The executor of the run ``spec`` with ``n_cells`` cells left (None: in this process)."""
    if spec.executor.backend == "ray":
        return RayExecutor(address=spec.cfg.ray_address, max_retries=spec.cfg.max_retries)
    return local_executor(spec.executor, n_cells)


def local_executor(choice: ExecutorChoice, n_cells: int) -> ProcessExecutor | None:
    """The local executor of a run with ``n_cells`` cells left, or None to run them in this process. On an
    accelerator each cell process is pinned to its group of GPUs; a run that keeps its cells in this process
    (``isolate_cells = false``, one worker) must see exactly the GPUs of one cell, since this process cannot be
    pinned once CUDA has started in it and the Trainer would otherwise spread one CPT over every visible GPU
    (``nn.DataParallel``) or train on ``cuda:0`` whatever ``cuda:N`` said."""
    workers, slots, device = choice.workers_for(n_cells), list(choice.slots), choice.device
    if not n_cells or (workers <= 1 and not choice.isolate):
        if n_cells and slots and (len(gpu_names()) != len(slots[0].split(",")) or str(device).partition(":")[2] not in {"", "0"}):
            raise ConfigError(f"cells in this process (isolate_cells = false, one worker) on {device} with "
                              f"{len(gpu_names())} visible GPU(s): set CUDA_VISIBLE_DEVICES to the GPU(s) of one "
                              f"cell ({choice.cpt_devices}), or let each cell run in a process of its own (the "
                              f"default on a GPU), which pins one GPU per cell")
        return None
    if slots:  # one cell process per group of GPUs at a time (--workers above the groups would wait for one)
        workers = min(workers, len(slots))
    return ProcessExecutor(workers, threads=max(1, available_cpus() // workers), fresh=choice.isolate, slots=slots)


def _init_process_worker(env: dict[str, str], threads: int, parent_pid: int | None = None,
                         slots: list[str] | None = None, slot_dir: str | None = None) -> None:
    import signal

    from harness.core import faults, processes

    if slots and slot_dir:  # this process's GPUs, before CUDA starts here (nothing has imported torch's CUDA yet)
        global _LEASE
        _LEASE = SlotLease(slots, slot_dir)
        pin(_LEASE.slot)

    processes.die_with_parent(parent_pid)  # killed with the harness process, whatever kills it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops the workers
    os.environ.update(env)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before torch is imported in this fresh process
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    faults.install()
    import atexit
    import gc

    atexit.register(gc.freeze)  # the worker's exit skips collecting torch's and mlflow's objects (seconds)


def _mark_dead(runner: Any, cells: list[Any]) -> None:
    """The runs of ``cells`` whose worker process died become KILLED now (their process is gone; a cell run
    again becomes RUNNING when it starts), not at the next command's start."""
    if cells:
        names = sorted({runner.spec.experiment(c.source) for c in cells})
        runner.tracker.mark_orphans_killed([runner.tracker.experiment(n) for n in names])


def _precreate_experiments(runner: Any, cells: list[Any]) -> None:
    """Create the cells' experiments here, before workers race to create the same one."""
    for source in sorted({c.source for c in cells}):
        runner.tracker.experiment(runner.spec.experiment(source))


_LEASE: SlotLease | None = None  # the GPUs a worker process holds while it lives


class ProcessExecutor:
    """``workers`` cells at a time in spawned processes with ``threads`` torch threads, each process pinned to
    one of ``slots`` (its CUDA_VISIBLE_DEVICES) when given. Workers log to the run's
    tracking URI and share the products through the harness home, as Ray workers do; a harness error (bad
    configuration, missing resource) stops the run, other failures mark their cell FAILED. ``fresh``: every cell in
    a process of its own (the default on an accelerator: a CUDA fault poisons its process's device, and the next
    cell then starts on a new one); otherwise a worker process runs one cell after another."""

    def __init__(self, workers: int, threads: int = 1, fresh: bool = False, slots: list[str] | None = None):
        self.workers = int(workers)
        self.threads = int(threads)
        self.fresh = bool(fresh)
        self.slots = list(slots or [])

    def run(self, runner: Any, cells: list[Any], on_done: Any = None) -> tuple[list[dict], list[dict]]:
        """Run ``cells``; a worker process that dies (killed, out of memory, crashed) breaks the pool and every cell
        not finished in it: those cells run again, one at a time, each in a fresh process (cells are idempotent:
        a cell resumes what it had logged and built), so that the cell whose process dies alone is the one that
        fails, and the others finish."""
        _precreate_experiments(runner, cells)
        done, failed, died = self._pass(runner, cells, self.workers, self.fresh, on_done)
        if died:
            say = getattr(runner, "say", print)
            say(f"cells: a worker process died (killed, out of memory or crashed), taking {len(died)} unfinished "
                f"cell(s) with it; running them again one at a time, each in a fresh process")
            _mark_dead(runner, died)
            again, failed_again, died_again = self._pass(runner, died, 1, True, on_done)
            done.extend(again)
            failed.extend(failed_again)
            _mark_dead(runner, died_again)
            for cell in died_again:
                failed.append({"cell": cell.label, "error": "its worker process died, alone in a fresh process "
                                                            "too (killed, out of memory or crashed)"})
                if on_done:
                    on_done(cell, True)
        return done, failed

    def _pass(self, runner: Any, cells: list[Any], workers: int, fresh: bool, on_done: Any
              ) -> tuple[list[dict], list[dict], list[Any]]:
        """One pool over ``cells``: (results, failures, the cells whose worker died under them)."""
        import multiprocessing as mp
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from concurrent.futures.process import BrokenProcessPool

        from harness.core import processes
        from harness.core.errors import HarnessError

        done, failed, died = [], [], []
        slot_dir = tempfile.mkdtemp(prefix="harness-gpu-slots-") if self.slots else None
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                   initializer=_init_process_worker,
                                   initargs=(_worker_env(runner.tracker.uri), self.threads, os.getpid(),
                                             self.slots, slot_dir),
                                   max_tasks_per_child=1 if fresh else None)
        futures: dict[Any, Any] = {}
        pending: set[Any] = set()
        try:
            # in the order given (the runner's: harness.plan.run_order), each worker taking the next when free
            futures = {pool.submit(_run_cell_in_worker, runner.spec, c, self.threads, True): c for c in cells}
            pending = set(futures)
            while pending:
                ready, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in ready:
                    cell = futures[fut]
                    bad = False
                    try:
                        done.append(fut.result())
                    except HarnessError:
                        raise
                    except BrokenProcessPool:  # its worker, or another worker of the pool, died: run again
                        died.append(cell)
                        continue
                    except Exception as exc:  # the cell's own error
                        failed.append({"cell": cell.label, "error": f"{type(exc).__name__}: {exc}"})
                        bad = True
                    if on_done:
                        on_done(cell, bad)
            pool.shutdown(wait=True)
        except BaseException:
            # stopped (SIGINT/SIGTERM) or a harness error: the workers stop now, not after their current cell. The
            # pool cancels its queued cells itself (a future cancelled here would be failed again by the pool's
            # manager thread when it finds its workers gone: InvalidStateError), then the workers are stopped;
            # what the pool's threads raise as it falls apart is not reported.
            procs = list((getattr(pool, "_processes", None) or {}).values())
            processes.quiet_threads()
            pool.shutdown(wait=False, cancel_futures=True)
            processes.stop_processes(procs)
            raise
        finally:
            if slot_dir:  # the GPU slots' lock files (each released when its process ended)
                shutil.rmtree(slot_dir, ignore_errors=True)
        died.sort(key=cells.index)  # in the run's order
        return done, failed, died

    def shutdown(self) -> None:
        pass


class RayExecutor:
    def __init__(self, address: str | None = None, max_retries: int = 3, num_cpus: int | None = None):
        self.address = address
        self.max_retries = max_retries
        self.num_cpus = num_cpus

    def _init(self, env: dict[str, str]) -> None:
        try:
            import ray
        except ImportError as exc:
            raise ConfigError("--executor ray needs Ray: pip install 'vocab-init-harness[ray]'") from exc
        if ray.is_initialized():
            return
        runtime_env = {"env_vars": env}
        if self.address:
            ray.init(address=self.address, runtime_env=runtime_env, log_to_driver=False)
        else:
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private instance on the loopback interface
            ray.init(num_cpus=self.num_cpus or os.cpu_count(), include_dashboard=False,
                     _node_ip_address="127.0.0.1", runtime_env=runtime_env, log_to_driver=False)

    def run(self, runner: Any, cells: list[Any], on_done: Any = None) -> tuple[list[dict], list[dict]]:
        import ray

        self._init(_worker_env(runner.tracker.uri))
        _precreate_experiments(runner, cells)
        res = runner.spec.resources()
        remote = ray.remote(_run_cell_in_worker).options(
            num_cpus=res["num_cpus"], num_gpus=res["num_gpus"], max_retries=self.max_retries,
            retry_exceptions=False)
        refs = {remote.remote(runner.spec, c, res["num_cpus"]): c for c in cells}
        done, failed = [], []
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            cell = refs[ready[0]]
            bad = False
            try:
                done.append(ray.get(ready[0]))
            except Exception as exc:  # the task's own exception, or retries exhausted
                cause = getattr(exc, "cause", None) or exc
                failed.append({"cell": cell.label, "error": f"{type(cause).__name__}: {cause}"})
                bad = True
            if on_done:
                on_done(cell, bad)
        return done, failed

    def shutdown(self) -> None:
        import ray

        if ray.is_initialized() and not self.address:
            ray.shutdown()
