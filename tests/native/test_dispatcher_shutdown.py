"""Interpreter exit while a daemon thread waits inside the dispatcher: no abort."""

from __future__ import annotations

import subprocess
import sys

# A daemon thread that keeps calling next_bin (as the GPU loop does) while the main thread exits.
_SCRIPT = """
import threading, time
from worker.dispatch import BinDispatcher
d = BinDispatcher(1024, pin_memory=False)
d.start()
def loop():
    while True:
        d.next_bin(0.01)
threading.Thread(target=loop, daemon=True).start()
time.sleep(0.2)
"""


def test_dispatcher_daemon_thread_in_next_bin_at_exit_does_not_abort() -> None:
    # Before the fix most runs ended with SIGABRT ("terminate called without an active exception").
    for _ in range(5):
        proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "terminate called" not in proc.stderr
