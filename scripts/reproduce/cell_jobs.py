"""A call's cells, seed by seed (:func:`submission_order`), each started once the cell it
starts from has finished: with ``--jobs 1`` here, one after the other in this process; else as
submitit jobs (:class:`Jobs`), here (``--jobs N`` at a time, each seeing one GPU with
``--device cuda``) or on Slurm (one job per cell, asking for the :class:`Resources`). A Slurm
job that is pre-empted or timed out requeues and resumes from its ``checkpoint_last.pt``
(:class:`CellJob` is ``Checkpointable``); one left running by a stopped call is waited for by
the next (:data:`JOB_ID`). Jobs log under ``WORK/jobs``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

import submitit
from submitit.helpers import Checkpointable

from scripts.common.child_processes import stop_children
from scripts.common.repo_paths import REPO_ROOT, git_commit
from scripts.reproduce.cell_plan import Cell, cell_depth
from scripts.reproduce.cell_steps import TIME_SPENT, BudgetSpent, CellFailed, StoppedByHand

JOB_ID = "slurm_job_id"  # in a cell's folder: its Slurm job, while it may still run
POLL_SECONDS = 0.2
ERRORS = {error.__name__: error for error in (CellFailed, BudgetSpent, StoppedByHand)}
# what a job in another process changes in its cell, brought back to the runner's
CELL_STATE = ("result", "stale", "device")


@dataclass
class Resources:
    """What each Slurm job asks for (flags, or ``--slurm-config`` JSON with these keys)."""

    partition: str | None = None
    time_minutes: int = 24 * 60
    gpus_per_job: int = 0
    cpus_per_job: int = 1
    mem_gb: float | None = None
    # shell lines run before each job (e.g. ``module load cuda``)
    setup: Sequence[str] = ()

    def slurm_parameters(self, name: str) -> Dict[str, Any]:
        found = {"job_name": name, "time": self.time_minutes, "nodes": 1,
                 "cpus_per_task": self.cpus_per_job, "setup": list(self.setup),
                 # submitit's signal to checkpoint and requeue, before the time limit
                 "signal_delay_s": 120}
        if self.partition:
            found["partition"] = self.partition
        if self.gpus_per_job:
            found["gpus_per_node"] = self.gpus_per_job
        if self.mem_gb:
            found["mem"] = f"{self.mem_gb:g}GB"
        return found

    def describe(self) -> str:
        return ", ".join([f"partition {self.partition or '(default)'}",
                          f"{self.gpus_per_job} GPU{'s' * (self.gpus_per_job != 1)}",
                          f"{self.cpus_per_job} CPU{'s' * (self.cpus_per_job != 1)}",
                          f"{self.mem_gb:g} GB" if self.mem_gb else "default memory",
                          f"{self.time_minutes} min"])


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (``/proc``), to tell it from a later one with its id."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _watch_runner(pid: int, started: str | None) -> None:
    """In a local job: once the runner ``pid`` has ended (SIGKILL too), stop the running step
    as a stop by hand does, and end this process 5 s later."""

    def watch() -> None:
        while _start_time(pid) == started:
            time.sleep(0.5)
        stop_children("the end of the runner")
        time.sleep(5)
        os._exit(1)

    if started is not None:  # Linux (/proc)
        threading.Thread(target=watch, daemon=True).start()


class CellJob(Checkpointable):
    """One cell's run as a submitit job in a process of its own: what it says goes back to
    the runner, and SIGTERM stops its step. The inherited ``checkpoint`` resubmits it."""

    def __init__(self, runner: tuple[int, str | None] | None = None) -> None:
        self.runner = runner  # a local job's runner: the job ends with it

    def __call__(self, cell: Cell) -> Dict[str, Any]:
        if self.runner is not None:
            _watch_runner(*self.runner)
        signal.signal(signal.SIGTERM, lambda *_: stop_children("SIGTERM"))
        said: List[str] = []

        def say(message: str) -> None:
            said.append(message)
            print(message, file=sys.stderr, flush=True)

        cell.owner.options.say = say
        try:
            cell.owner.run_cell(cell)
        except (CellFailed, BudgetSpent) as error:
            return {"error": type(error).__name__, "message": str(error), "said": said}
        return {"cell": {name: getattr(cell, name) for name in CELL_STATE}, "said": said}


def _slurm_state(job_id: str) -> str | None:
    """The Slurm job's state while Slurm lists it (queued, running, ending), else None."""
    found = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                           text=True)
    return found.stdout.strip() or None


class Jobs:
    """The jobs of one call, each in a process of its own: ``--jobs`` at a time here, all
    that are ready on Slurm."""

    def __init__(self, options: Any, name: str) -> None:
        self.options = options
        self.slurm = options.executor == "slurm"
        self.limit = 10 ** 6 if self.slurm else options.jobs
        self.running: Dict[int, tuple[Cell, Any]] = {}  # id(cell) -> (cell, its job)
        # with --device cuda here: this machine's GPUs, and the one each running cell has
        self.gpus = _gpu_count() if options.device == "cuda" and not self.slurm else 0
        self.gpu_of: Dict[int, int] = {}
        # the tree's own modules in the jobs, wherever they start (they get this environment)
        paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if str(REPO_ROOT) not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), *paths]))
        folder = options.work / "jobs" / name
        if self.slurm:
            self.executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=10)
            self.executor.update_parameters(**options.resources.slurm_parameters(name))
            self.call = CellJob()
        else:
            self.executor = submitit.LocalExecutor(folder=folder)
            # no limit: submitit's local timeout would requeue a long training
            self.executor.update_parameters(timeout_min=10 ** 6)
            self.call = CellJob((os.getpid(), _start_time(os.getpid())))

    def submit(self, cell: Cell) -> None:
        job = self.attached(cell) if self.slurm else None
        if job is not None:
            self.options.say(f"  {cell.folder.name}: its Slurm job {job.job_id} still runs: "
                             "waiting for it")
        else:
            if self.gpus:  # the GPU fewest running cells have (the first such)
                free = min(range(self.gpus), key=list(self.gpu_of.values()).count)
                self.gpu_of[id(cell)] = free
                self.executor.update_parameters(gpus_per_node=1, visible_gpus=[free])
            cell.folder.mkdir(parents=True, exist_ok=True)
            job = self.started(cell)
            if self.slurm:
                (cell.folder / JOB_ID).write_text(f"{job.job_id}\n")
            # what it says comes when it ends; its log says it now
            self.options.say(f"  {cell.folder.name}: job {job.job_id}, its log "
                             f"{job.paths.stderr}")
        self.running[id(cell)] = (cell, job)

    def started(self, cell: Cell) -> Any:
        """Submit the cell's job. Local job processes ignore SIGINT, so that Ctrl-C reaches
        the runner alone, which stops them (:meth:`stop`), not submitit's controller."""
        if self.slurm:
            try:
                return self.executor.submit(self.call, cell)
            except submitit.core.utils.FailedJobError as error:  # sbatch's refusal
                last = str(error).strip().splitlines()[-1]
                raise SystemExit(f"--executor slurm: sbatch refused {cell.folder.name}'s job "
                                 f"({last}): check --partition, --time-minutes, "
                                 "--gpus-per-job, --mem-gb or --slurm-config") from None
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return self.executor.submit(self.call, cell)
        finally:
            signal.signal(signal.SIGINT, previous)

    def attached(self, cell: Cell) -> Any:
        """The cell's Slurm job that a stopped call left queued or running, if any."""
        path = cell.folder / JOB_ID
        job_id = path.read_text().strip() if path.is_file() else None
        if job_id is None or _slurm_state(job_id) not in (
                "PENDING", "RUNNING", "REQUEUED", "SUSPENDED"):
            return None
        return submitit.SlurmJob(folder=self.executor.folder, job_id=job_id)

    def finished(self) -> List[tuple[Cell, Dict[str, Any]]]:
        """The cells whose jobs have ended, each with what its job returned."""
        ended = []
        for key, (cell, job) in list(self.running.items()):
            if self.slurm and not job.paths.result_pickle.exists():
                if _slurm_state(job.job_id) is not None:
                    continue
                time.sleep(2)  # its result may land just after it leaves the queue
            elif not self.slurm and not job.done():
                continue
            del self.running[key]
            self.gpu_of.pop(key, None)
            ended.append((cell, self.outcome(cell, job)))
        return ended

    def outcome(self, cell: Cell, job: Any) -> Dict[str, Any]:
        """What the ended ``job`` of ``cell`` returned, or the error it ended with."""
        returned = job.paths.result_pickle.exists()
        error = job.exception() if returned else None
        found = job.result() if returned and error is None else {
            "error": "CellFailed", "said": [], "message": (
                f"{cell.folder.name}: its job {job.job_id} failed or was cancelled (its log: "
                f"{job.paths.stderr}); the same command resumes it from its last checkpoint"
                + (f":\n{str(error)[-1500:]}" if error is not None else ""))}
        if self.slurm and found.get("error") == "StoppedByHand":
            # scancel or pre-emption: the next call waits for a requeued job (its id stays)
            found["message"] = (f"{cell.folder.name}: its Slurm job {job.job_id} was stopped "
                                "(SIGTERM: scancel, or pre-emption); the same command "
                                "resumes it from its last checkpoint")
            job.paths.result_pickle.unlink()
        elif self.slurm:
            (cell.folder / JOB_ID).unlink(missing_ok=True)
        return found

    def stop(self) -> None:
        """Stop the running local jobs and wait for them; Slurm's go on."""
        if self.slurm:
            if self.running:
                self.options.say(f"  {len(self.running)} Slurm job(s) go on: the same "
                                 "command waits for them")
            self.running.clear()
            return
        processes = [job._process for _, job in self.running.values()
                     if getattr(job, "_process", None) is not None]
        for process in processes:
            process.send_signal(signal.SIGTERM)  # its controller passes it on
        for process in processes:
            process.wait()


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def submission_order(cells: Sequence[Cell]) -> List[Cell]:
    """Seed by seed (every row of seed 1, then of seed 2, ...), parents first: the rows a
    claim pairs at one seed finish together, and a call cut short leaves whole pairs."""
    return sorted(cells, key=lambda cell: (cell.seed, cell_depth(cell)))


def run_cells(table: Any, todo: Sequence[Cell], stopped: Callable[[], str | None]) -> None:
    """Run ``todo`` in :func:`submission_order`, a cell once its parent has finished: with
    ``--jobs 1`` here in this process, else as jobs (:class:`Jobs`). After a failure, a spent
    budget or a stop (``stopped()``) no cell starts, and the first error is raised."""
    options, root = table.options, table.root
    root.commit_id = root.commit_id or git_commit()  # the code the cells of this call run
    jobs = None if options.executor == "local" and options.jobs == 1 else Jobs(
        options, table.spec.name)
    waiting = submission_order(todo)
    pending = {id(cell) for cell in waiting}
    error: BaseException | None = None

    def done(cell: Cell) -> None:
        pending.discard(id(cell))
        options.finished.append(cell.folder.name)

    try:
        while waiting or (jobs and jobs.running):
            for cell, outcome in jobs.finished() if jobs else ():
                pending.discard(id(cell))
                for line in outcome["said"]:
                    options.say(line)
                if "error" in outcome:
                    error = error or ERRORS[outcome["error"]](outcome["message"])
                    continue
                for name, value in outcome["cell"].items():
                    setattr(cell, name, value)
                done(cell)
            if stopped() is not None and error is None:
                error = StoppedByHand(f"stopped by {stopped()}")
                if jobs:
                    jobs.stop()
            if error is not None:
                waiting = []
            free = jobs.limit - len(jobs.running) if jobs else 1
            ready = [cell for cell in waiting
                     if cell.parent is None or id(cell.parent) not in pending][:free]
            for cell in ready:
                if options.max_new_cells is not None and root.started >= options.max_new_cells:
                    error = BudgetSpent(f"stopped after {options.max_new_cells} new cells")
                elif options.deadline is not None and time.time() >= options.deadline:
                    error = BudgetSpent(TIME_SPENT)
                if error is not None:
                    waiting = []
                    break
                waiting.remove(cell)
                root.started += 1
                cell.owner = cell.owner or table  # a grid cell: of the table that runs it
                if jobs:
                    jobs.submit(cell)
                else:
                    cell.owner.run_cell(cell)
                    done(cell)
            if jobs and jobs.running:
                time.sleep(POLL_SECONDS)
    except BaseException:
        if jobs:
            jobs.stop()
        raise
    if error is not None:
        raise error


def job_words(options: Any) -> str:
    """What one cell's job asks for, as a dry run prints it under the cell's commands."""
    if options.executor == "slurm":
        return f"Slurm, {options.resources.describe()}"
    return "here" + (", one GPU of this machine" if options.device == "cuda" else "")


def read_resources(args: Any) -> Resources:
    """The Slurm flags of ``args`` over ``--slurm-config`` (JSON) over the defaults
    (``--threads`` CPUs; a GPU with ``--device cuda`` or at paper scale, whose recipes train
    on one); a bad file is a one-line exit."""
    path, found = args.slurm_config, {}
    known = set(Resources.__dataclass_fields__)
    if path is not None:
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise SystemExit(f"--slurm-config: cannot read {path} as JSON ({error})") from None
        if not isinstance(found, dict) or set(found) - known:
            raise SystemExit(f"--slurm-config: {path} must be a JSON object with keys among "
                             f"{', '.join(sorted(known))}")
    flags = {key: getattr(args, key) for key in known if getattr(args, key, None) is not None}
    return Resources(**{"cpus_per_job": args.threads,
                        "gpus_per_job": int(args.device == "cuda" or args.scale == "paper"),
                        **found, **flags})
