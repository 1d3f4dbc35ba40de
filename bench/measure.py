"""Run a command and measure it: wall time, and the peak resident memory of its process tree
(sampled with psutil), with the JVMs seen in the tree (evidence that a run did or did not start
Spark)."""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import psutil

SAMPLE_SECONDS = 0.1


@dataclass
class Measurement:
    wall_seconds: float
    returncode: int
    peak_tree_rss_mb: float
    peak_jvm_rss_mb: float
    jvm_pids: list[int] = field(default_factory=list)
    output: str = ""
    tree_cpu_seconds: float = 0.0
    """CPU time (user + system) of the process tree, as last sampled per process."""
    machine_busy_share: float = 0.0
    """The share of all the machine's cores that was busy during the run (1.0: every core all the time)."""
    peak_python_rss_mb: float = 0.0
    """The largest single Python process of the tree (a PySpark job's driver)."""

    def summary(self) -> dict:
        return {"wall_seconds": round(self.wall_seconds, 3), "returncode": self.returncode,
                "peak_tree_rss_mb": round(self.peak_tree_rss_mb, 1), "peak_jvm_rss_mb": round(self.peak_jvm_rss_mb, 1),
                "jvms_started": len(self.jvm_pids), "tree_cpu_seconds": round(self.tree_cpu_seconds, 1),
                "machine_busy_share": round(self.machine_busy_share, 3),
                "peak_python_rss_mb": round(self.peak_python_rss_mb, 1)}


def _is_jvm(proc: psutil.Process) -> bool:
    try:
        return proc.name() == "java"
    except psutil.Error:
        return False


def _is_python(proc: psutil.Process) -> bool:
    try:
        return proc.name().startswith("python")
    except psutil.Error:
        return False


class TreeSampler(threading.Thread):
    """Samples the RSS of a process and all its descendants until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.peak_tree = 0
        self.peak_jvm = 0
        self.peak_python = 0
        self.jvm_pids: set[int] = set()
        self.cpu: dict[int, float] = {}
        self._stop_event = threading.Event()

    def _sample(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        total = 0
        for proc in procs:
            try:
                rss = proc.memory_info().rss
                times = proc.cpu_times()
            except psutil.Error:
                continue
            self.cpu[proc.pid] = times.user + times.system
            total += rss
            if _is_jvm(proc):
                self.jvm_pids.add(proc.pid)
                self.peak_jvm = max(self.peak_jvm, rss)
            elif _is_python(proc):
                self.peak_python = max(self.peak_python, rss)
        self.peak_tree = max(self.peak_tree, total)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self._sample()
            self._stop_event.wait(SAMPLE_SECONDS)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    @property
    def cpu_seconds(self) -> float:
        return sum(self.cpu.values())


def _children_map() -> dict[int, list[int]]:
    """Every process's children, from one scan of the process table."""
    children: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        children.setdefault(proc.info["ppid"], []).append(proc.pid)
    return children


def _tree(root: int, children: dict[int, list[int]], with_root: bool = True) -> list[int]:
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found if with_root else found[1:]


def _cpu(proc: psutil.Process) -> float:
    """A process's CPU seconds and those of the children it has reaped (gone, so counted nowhere else)."""
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


class TreesSampler(threading.Thread):
    """Several process trees together, e.g. long-running services and everything they start: the peak of
    their summed RSS (sampled every ``interval`` s), and each tree's CPU seconds between start() and
    stop(). CPU is exact, not sampled: a tree's CPU at a moment is the sum over its living processes of
    their own and their reaped children's times, so a task that ran and exited between two samples
    still counts (a process orphaned out of its tree would not). ``roots``: name -> pid. With
    ``own_children``, the one tree is this process's children (jobs it launches), this process left out;
    their CPU is this process's reaped children's (``resource.getrusage``) plus the living ones'."""

    def __init__(self, roots: dict[str, int] | None = None, interval: float = 0.2, own_children: bool = False) -> None:
        super().__init__(daemon=True)
        self.roots = {"jobs": os.getpid()} if own_children else dict(roots or {})
        self.own_children = own_children
        self.interval = interval
        self.peak_rss = 0
        self.start_rss: int | None = None
        """The trees' RSS at the first sample (long-running services: what they hold before the work)."""
        self.peak_processes = 0
        self.jvm_pids: set[int] = set()
        self._cpu_start: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self._stop_event = threading.Event()

    def _trees(self) -> dict[str, list[psutil.Process]]:
        children = _children_map()
        trees = {}
        for name, root in self.roots.items():
            procs = []
            for pid in _tree(root, children, with_root=not self.own_children):
                try:
                    procs.append(psutil.Process(pid))
                except psutil.Error:
                    continue
            trees[name] = procs
        return trees

    def _cpu_now(self) -> dict[str, float]:
        out = {}
        for name, procs in self._trees().items():
            total = 0.0
            for proc in procs:
                try:
                    total += _cpu(proc)
                except psutil.Error:
                    continue
            out[name] = total
        if self.own_children:
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            out["jobs"] += usage.ru_utime + usage.ru_stime
        return out

    def _sample(self) -> None:
        total = count = 0
        for procs in self._trees().values():
            for proc in procs:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    continue
                count += 1
                if _is_jvm(proc):
                    self.jvm_pids.add(proc.pid)
        if self.start_rss is None:
            self.start_rss = total
        self.peak_rss = max(self.peak_rss, total)
        self.peak_processes = max(self.peak_processes, count)

    def start(self) -> None:
        self._cpu_start = self._cpu_now()
        super().start()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self._sample()
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        end = self._cpu_now()
        self.cpu_seconds = {name: round(end.get(name, 0.0) - self._cpu_start.get(name, 0.0), 1) for name in self.roots}

    def summary(self) -> dict:
        return {"cpu_seconds": round(sum(self.cpu_seconds.values()), 1), "cpu_seconds_by_tree": self.cpu_seconds,
                "peak_rss_mb": round(self.peak_rss / 2**20, 1),
                "rss_at_start_mb": round((self.start_rss or 0) / 2**20, 1),
                "peak_processes": self.peak_processes,
                "jvms_seen": len(self.jvm_pids)}


def busy_share(before, after) -> float:
    """The busy share of every core between two ``psutil.cpu_times()``."""
    total = sum(after) - sum(before)
    idle = (after.idle + getattr(after, "iowait", 0)) - (before.idle + getattr(before, "iowait", 0))
    return 0.0 if total <= 0 else 1 - idle / total


def run_measured(command: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 3600,
                 cwd: str | None = None) -> Measurement:
    """Run ``command`` to completion (output captured) and measure it."""
    started = time.perf_counter()
    cpu_before = psutil.cpu_times()
    proc = subprocess.Popen(list(command), env=dict(env) if env is not None else None, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = TreeSampler(proc.pid)
    sampler.start()
    try:
        output, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sampler.stop()
    wall = time.perf_counter() - started
    return Measurement(wall, proc.returncode, sampler.peak_tree / 2**20, sampler.peak_jvm / 2**20,
                       sorted(sampler.jvm_pids), output or "", sampler.cpu_seconds,
                       busy_share(cpu_before, psutil.cpu_times()), sampler.peak_python / 2**20)


def check(measurement: Measurement, what: str) -> Measurement:
    """Fail loudly (with the tail of the output) when a measured command failed."""
    if measurement.returncode != 0:
        raise RuntimeError(f"{what} exited with {measurement.returncode}:\n{measurement.output[-4000:]}")
    return measurement
