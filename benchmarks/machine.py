"""The machine a benchmark ran on, written beside its figures: CPU, ISA, int8 path, threads, load.

A ratio measured on a shared 2-core machine means little without the CPU it ran on and how
busy the machine was, so every speed benchmark prints :func:`describe` before and after.
"""

from __future__ import annotations

import os

# Imported before tvm: tvm-ffi imports torch when it is installed, which loads libgomp, and
# libgomp reads its wait policy once, at load. tenet_byoc sets PASSIVE itself when it is
# imported first; a benchmark imports tvm first, so the policy is set here (a user's wins).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import datetime
import time
from dataclasses import dataclass

import numpy as np

import tenet_byoc


@dataclass(frozen=True)
class Machine:
    """What the figures of one benchmark run were measured on.

    Attributes
    ----------
    date : str
        UTC time the run started, ``YYYY-MM-DD HH:MM UTC``.
    cpu : str
        The CPU model (``tenet_byoc.cpu_info().model``).
    isa : str
        The ISA oneDNN runs (``avx2``, ``avx512_core_vnni``, ...).
    int8_path : str
        ``native`` (oneDNN's int8 GEMM, VNNI) or ``widened`` (exact on any x86-64).
    threads : int
        OpenMP threads of the tenet GEMMs.
    logical_cpus : int
        ``os.cpu_count()``.
    load_before : tuple of float
        ``os.getloadavg()`` when the run started (1, 5 and 15 minutes).
    """

    date: str
    cpu: str
    isa: str
    int8_path: str
    threads: int
    logical_cpus: int
    load_before: tuple[float, float, float]

    def line(self, load_after: tuple[float, float, float] | None = None) -> str:
        """One markdown-ready sentence naming the machine, with the load before (and after)."""
        load = f"load average {_load(self.load_before)} before"
        if load_after is not None:
            load += f", {_load(load_after)} after"
        return (f"{self.date} on {self.cpu} ({self.logical_cpus} logical CPUs), oneDNN ISA "
                f"{self.isa}, int8 path {self.int8_path}, {self.threads} threads, "
                f"numpy {np.__version__}; {load}")


def _load(avg: tuple[float, float, float]) -> str:
    return "/".join(f"{x:.1f}" for x in avg)


def describe() -> Machine:
    """The machine this process runs on, with the load average now."""
    info = tenet_byoc.cpu_info()
    return Machine(
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        cpu=info.model, isa=info.isa, int8_path=info.int8_path, threads=info.threads,
        logical_cpus=os.cpu_count() or 1, load_before=os.getloadavg(),
    )


def wait_idle(window: float = 0.005, busy: float = 0.05, limit: float = 1.0) -> float:
    """Sleep until this process's own threads are idle; return the seconds waited.

    A BLAS or runtime thread pool keeps its workers spinning for a while after a call
    returns (OpenBLAS's for about 0.1 s by default, TVM's for a spin count): in back-to-back
    alternation they hold a core through the next contender's call and halve its speed, so
    the figure measures the previous contender's idle threads, not the kernel. Each timed
    call of the benchmarks starts after this: the process has used under ``busy`` of a
    core over a ``window`` of sleep (at most ``limit`` seconds are waited).
    """
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        c0, t0 = time.process_time(), time.perf_counter()
        time.sleep(window)
        if time.process_time() - c0 < busy * (time.perf_counter() - t0):
            break
    return time.perf_counter() - start


def load_now() -> tuple[float, float, float]:
    """``os.getloadavg()``: the load average when the run ends."""
    return os.getloadavg()
