"""Helpers shared by the GPU benchmark scripts under bench/: synchronised timing, NVML sampling, the host."""

from __future__ import annotations

import os
import statistics
import threading
import time

import torch


def host_cpu(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The host's processor model and core count, e.g. "AMD EPYC 9454 48-Core Processor, 16 cores": H100
    machines of one kind ran the SmolLM2 shape's host-bound figures 23-26 % apart (bench/NOTES.md,
    2026-12-07 sixth), so a result names its host too."""
    try:
        with open(cpuinfo) as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        model = ""
    return f"{model or 'unknown processor'}, {os.cpu_count()} cores"


class HostCpuShares:
    """How the host's CPUs spent a window, from /proc/stat's first line at its start and end: shares of
    busy (user, nice, system, interrupts), I/O wait, idle, and steal (time the hypervisor gave another
    guest of a shared host). A host-bound figure is read against these: steal or a busy host explains
    a slow run that the GPU's busy share alone does not."""

    _FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

    def __init__(self, stat: str = "/proc/stat") -> None:
        self.stat = stat
        self._start: list[int] | None = None
        self._end: list[int] | None = None

    def _read(self) -> list[int] | None:
        try:
            with open(self.stat) as f:
                first = f.readline().split()
        except OSError:
            return None
        if not first or first[0] != "cpu":
            return None
        values = [int(x) for x in first[1:1 + len(self._FIELDS)]]
        return values + [0] * (len(self._FIELDS) - len(values))  # older kernels give fewer fields

    def start(self) -> HostCpuShares:
        self._start, self._end = self._read(), None
        return self

    def stop(self) -> None:
        self._end = self._read()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def shares(self) -> dict:
        """{"busy", "iowait", "idle", "steal"}: shares of all CPUs' time over the window ({} unreadable)."""
        if self._start is None or self._end is None:
            return {}
        d = dict(zip(self._FIELDS, (b - a for a, b in zip(self._start, self._end))))
        total = sum(d.values())
        if total <= 0:
            return {}
        busy = d["user"] + d["nice"] + d["system"] + d["irq"] + d["softirq"]
        return {name: round(v / total, 4) for name, v in
                (("busy", busy), ("iowait", d["iowait"]), ("idle", d["idle"]), ("steal", d["steal"]))}


def sync_time() -> float:
    """perf_counter after every queued kernel has finished."""
    torch.cuda.synchronize()
    return time.perf_counter()


class GpuBusySampler:
    """Samples NVML's utilization (share of time a kernel ran) every 10 ms while active."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.samples.append((time.perf_counter(), torch.cuda.utilization()))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def busy_fraction(self, lo: float = 0.1, hi: float = 0.9) -> float:
        """Mean busy share over the middle of the window (lo..hi of it): the steady state."""
        if len(self.samples) < 2:
            return float("nan")
        t0, t1 = self.samples[0][0], self.samples[-1][0]
        mid = [u for t, u in self.samples if t0 + lo * (t1 - t0) <= t <= t0 + hi * (t1 - t0)]
        return statistics.mean(mid) / 100.0 if mid else float("nan")

    def idle_fraction(self, lo: float = 0.1, hi: float = 0.9) -> float:
        return 1.0 - self.busy_fraction(lo, hi)
