"""flow.cli: a worker started by a flow stage ends when the stage's process ends."""
import os
import signal
import subprocess
import sys
import time

import pytest

PARENT = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "from flow.cli import die_with_parent; die_with_parent(); "
                          "import os, time; print(os.getpid(), flush=True); time.sleep(120)"], stdout=subprocess.PIPE)
print(child.stdout.readline().decode().strip(), flush=True)    # the child's pid, once it is armed
import time; time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:            # a zombie has ended; only its parent has not reaped it
        return f.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_worker_dies_with_its_parent():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    for _ in range(50):
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child)
