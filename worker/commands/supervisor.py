"""`telesum worker --gpus`: one worker process per GPU, all in one consumer group, under one supervisor.

Each child is a plain `telesum worker` with CUDA_VISIBLE_DEVICES set to its GPU, so it loads its own
model copy, dispatcher and engine; Kafka's group protocol splits the partitions between them.
The supervisor forwards SIGTERM/SIGINT, waits for the children to drain (drain deadline + margin),
reports a child that dies while the others keep serving (its partitions move to the survivors),
and exits non-zero when any child failed. Children run in their own session so a terminal's
Ctrl-C reaches them once, through the supervisor; they exit when the supervisor dies (PDEATHSIG).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

from worker.commands.exit_codes import EXIT_DRAINED, EXIT_FAILED
from worker.settings.environment import SUPERVISOR_PID as SUPERVISOR_PID_ENV
from worker.settings.fields import SettingsError
from worker.settings.load import CONFIG_ENV, environment_names, to_environment
from worker.settings.sections import Settings

log = logging.getLogger(__name__)

# After the drain deadline a child still closes its clients (producer close waits up to 10 s,
# the summarizer up to 5 s); past this margin it is killed and counted as failed.
DRAIN_MARGIN_S = 20.0
# How often the supervisor checks on its children.
_WATCH_INTERVAL_S = 0.2
# A child's last output lines are relayed before the verdict; a grandchild holding the pipe open
# must not hold the supervisor past this.
_RELAY_JOIN_S = 2.0
_GPUS = "--gpus (TELESUM_GPUS)"


@dataclass(frozen=True)
class Slot:
    """One child process: its position (metrics port offset), name and CUDA_VISIBLE_DEVICES."""

    index: int
    name: str                 # "gpu3" or "cpu1": log prefix and worker-id suffix
    visible_devices: str      # the child's CUDA_VISIBLE_DEVICES ("" hides every GPU)
    device: str               # the child's --device


def parse_gpus(spec: str, visible: Sequence[str]) -> list[Slot]:
    """'all' | 'N' (the first N) | 'I,J,...' (indices into `visible`; one GPU: 'I,'; a repeated index
    puts several processes on one GPU) | 'cpu:N'. `visible` are the GPU ids this process may hand out. Raises SettingsError naming the problem."""
    text = spec.strip().lower()
    if text.startswith("cpu:"):
        count = _positive_int(text[4:], spec)
        return [Slot(i, f"cpu{i}", "", "cpu") for i in range(count)]
    if not visible:
        raise SettingsError(f"{_GPUS} is {spec!r} but no CUDA GPU is visible to this process; "
                            "use --gpus cpu:N to run N CPU worker processes (testing only)")
    if text == "all":
        chosen = list(range(len(visible)))
    elif "," in text:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts or not all(p.isdigit() for p in parts):
            raise SettingsError(f"{_GPUS} list must be GPU indices like '0,2' (one GPU: '3,'); got {spec!r}")
        chosen = [int(p) for p in parts]  # a repeated index shares that GPU between processes
        missing = [i for i in chosen if i >= len(visible)]
        if missing:
            raise SettingsError(f"{_GPUS} names GPU {missing[0]} but only {len(visible)} "
                                f"({', '.join(visible)}) are visible")
    else:
        count = _positive_int(text, spec)
        if count > len(visible):
            raise SettingsError(f"{_GPUS} asks for {count} GPUs but only {len(visible)} are visible")
        chosen = list(range(count))
    slots = []
    for pos, i in enumerate(chosen):
        repeat = chosen[:pos].count(i)
        slots.append(Slot(pos, f"gpu{visible[i]}" + (f".{repeat}" if repeat else ""), visible[i], "cuda"))
    return slots


def visible_gpus() -> list[str]:
    """The GPU ids this process may hand out: its CUDA_VISIBLE_DEVICES entries, else 0..count-1."""
    import torch

    count = torch.cuda.device_count()
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return [str(i) for i in range(count)]
    return [v.strip() for v in env.split(",") if v.strip()][:count]


def _positive_int(text: str, spec: str) -> int:
    if not text.strip().isdigit() or int(text) <= 0:
        raise SettingsError(f"{_GPUS} must be 'all', a count N > 0, a list '0,2' or 'cpu:N'; got {spec!r}")
    return int(text)


def child_environment(settings: Settings, slot: Slot, base: dict[str, str]) -> dict[str, str]:
    """The environment of `slot`'s child: `base` without any setting (or config file), then every
    setting of one unsupervised worker on that slot's device, worker id `<worker>-<slot>`, metrics
    port base + index."""
    device, kafka, port = settings.engine.device, settings.kafka, settings.http.metrics_port
    if device not in ("auto", slot.device):
        raise SettingsError(f"--device {device!r} conflicts with {_GPUS} {kafka.gpus!r}: "
                            "each child's device comes from --gpus; leave --device at 'auto'")
    env = {k: v for k, v in base.items() if k not in environment_names() and k != CONFIG_ENV}
    env.update(to_environment(settings))
    env.pop("TELESUM_GPUS", None)  # a child is one worker, never a supervisor
    env.update({"TELESUM_DEVICE": slot.device, "TELESUM_WORKER_ID": f"{kafka.worker_name}-{slot.name}",
                "TELESUM_METRICS_PORT": str(port + slot.index if port else 0),
                "CUDA_VISIBLE_DEVICES": slot.visible_devices, SUPERVISOR_PID_ENV: str(os.getpid())})
    return env


@dataclass
class _Child:
    slot: Slot
    proc: subprocess.Popen
    returncode: int | None = None
    unexpected: bool = False     # exited before any stop was asked for
    killed_at_deadline: bool = False


class Supervisor:
    """Runs one child per slot until they have all exited. `run()` from the main thread."""

    def __init__(self, settings: Settings, slots: Sequence[Slot], child_argv: Sequence[str],
                 out: BinaryIO | None = None, margin_s: float = DRAIN_MARGIN_S) -> None:
        port = settings.http.metrics_port
        if port and port + len(slots) - 1 > 65535:
            raise SettingsError(f"metrics ports {port}..+{len(slots) - 1} exceed 65535")
        self.settings = settings
        self.slots = list(slots)
        self.child_argv = list(child_argv)
        self.out = out if out is not None else sys.stdout.buffer
        self.margin_s = margin_s
        # Built (and so validated) before any child starts.
        self._envs = [child_environment(settings, slot, dict(os.environ)) for slot in self.slots]
        self.children: list[_Child] = []
        self._out_lock = threading.Lock()  # protects self.out: one child's line at a time
        self._signals: list[int] = []      # signals received, in order (appended by the handler)
        self._relays: list[threading.Thread] = []

    def start(self) -> None:
        """Start every child; their output goes to `out`, each line prefixed with the slot name
        (JSON log lines stay whole: their `worker` field names the child)."""
        for slot, env in zip(self.slots, self._envs):
            proc = subprocess.Popen(self.child_argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            self.children.append(_Child(slot, proc))
            relay = threading.Thread(target=self._relay, args=(slot.name, proc.stdout), name=f"relay-{slot.name}",
                                     daemon=True)
            relay.start()
            self._relays.append(relay)
            log.info("supervisor: started worker %s (pid %d, CUDA_VISIBLE_DEVICES=%r)", slot.name, proc.pid,
                     slot.visible_devices)
            if self._signals:  # a stop arrived while earlier children were starting
                proc.send_signal(self._signals[0])

    def forward(self, signum: int) -> None:
        """Pass `signum` to every living child: the first asks for a drain, a second for an exit at once.
        Safe from a signal handler."""
        self._signals.append(signum)
        for child in self.children:
            if child.returncode is None and child.proc.poll() is None:
                child.proc.send_signal(signum)

    def run(self) -> int:
        """Watch the children until all have exited; 0 only when every child drained and exited 0."""
        deadline: float | None = None
        while True:
            for child in self.children:
                if child.returncode is None and child.proc.poll() is not None:
                    self._on_exit(child)
            living = [c for c in self.children if c.returncode is None]
            if not living:
                break
            if self._signals and deadline is None:
                deadline = time.monotonic() + self.settings.kafka.drain_timeout_s + self.margin_s
                log.info("supervisor: %s forwarded to %d workers; waiting up to %.0fs for them to drain",
                         signal.Signals(self._signals[0]).name, len(living), deadline - time.monotonic())
            if deadline is not None and time.monotonic() > deadline:
                for child in (c for c in living if not c.killed_at_deadline):
                    log.error("supervisor: worker %s (pid %d) still running past the drain deadline; killing it",
                              child.slot.name, child.proc.pid)
                    child.killed_at_deadline = True
                    child.proc.kill()
            time.sleep(_WATCH_INTERVAL_S)
        for relay in self._relays:  # the children's last lines before the verdict
            relay.join(_RELAY_JOIN_S)
        return self._report()

    def _on_exit(self, child: _Child) -> None:
        child.returncode = child.proc.returncode
        child.unexpected = not self._signals
        if child.unexpected:
            serving = sum(c.returncode is None for c in self.children)
            log.error("supervisor: worker %s (pid %d) died unexpectedly: %s; %d of %d workers still serving%s",
                      child.slot.name, child.proc.pid, describe_exit(child.returncode), serving,
                      len(self.children), " (its partitions move to them)" if serving else "")
        else:
            level = logging.INFO if child.returncode == 0 else logging.ERROR
            log.log(level, "supervisor: worker %s (pid %d) exited: %s", child.slot.name, child.proc.pid,
                    describe_exit(child.returncode))

    def _report(self) -> int:
        failed = [c for c in self.children if c.unexpected or c.returncode != 0]
        if not failed:
            log.info("supervisor: all %d workers drained and exited cleanly", len(self.children))
            return EXIT_DRAINED
        for c in failed:
            why = "died while serving" if c.unexpected else (
                "killed at the drain deadline" if c.killed_at_deadline else "failed to drain cleanly")
            log.error("supervisor: worker %s (pid %d) %s: %s", c.slot.name, c.proc.pid, why,
                      describe_exit(c.returncode))
        log.error("supervisor: %d of %d workers failed; exiting with %d", len(failed), len(self.children), EXIT_FAILED)
        return EXIT_FAILED

    def _relay(self, name: str, stream: BinaryIO) -> None:
        prefix = b"" if self.settings.log.format == "json" else f"[{name}] ".encode()
        broken = False
        for line in iter(stream.readline, b""):
            if broken:
                continue  # keep reading: a child blocked on a full pipe would stop serving
            with self._out_lock:
                try:
                    self.out.write(prefix + line)
                    self.out.flush()
                except (OSError, ValueError):  # our own output is gone (closed pipe or file)
                    broken = True
        stream.close()


def describe_exit(returncode: int | None) -> str:
    """'exit code 3' or 'killed by SIGKILL' for a Popen return code."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def run_supervised(settings: Settings, verbose: bool = False) -> int:
    """`telesum worker --gpus ...`: start the set, forward SIGTERM/SIGINT, return the set's exit code."""
    spec = settings.kafka.gpus or ""
    slots = parse_gpus(spec, [] if spec.strip().lower().startswith("cpu:") else visible_gpus())
    argv = [sys.executable, "-m", "worker.cli", *(["-v"] if verbose else []), "worker"]
    supervisor = Supervisor(settings, slots, argv)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda s, _frame: supervisor.forward(s))
    supervisor.start()
    return supervisor.run()


def follow_supervisor() -> None:
    """In a child: exit (SIGTERM, so it drains) when the supervisor dies. No-op when unsupervised."""
    parent = os.environ.get(SUPERVISOR_PID_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != int(parent):  # it died before the line above took effect
        os.kill(os.getpid(), signal.SIGTERM)
