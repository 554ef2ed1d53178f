"""bench/staging/kstacks.py: it finds a bench pull's threads by their command line and says where each waits."""

import subprocess
import sys
import time

from conftest import load_script

KSTACKS = load_script("bench/staging/kstacks.py")


def test_a_pull_is_found_by_its_method_and_its_sleep_is_reported():
    marker = "kstacks-test-%d" % time.monotonic_ns()
    code = "import sys, time; time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code, marker, "--pull", "verified_lane"])
    try:
        deadline = time.monotonic() + 10
        found = []
        while not found and time.monotonic() < deadline:
            found = KSTACKS.threads(marker)
            time.sleep(0.05)
        assert found and all(role == "pull verified_lane" for role, _pid, _tid, _name in found)
        states = set()
        while time.monotonic() < deadline and "S" not in states:
            states = {KSTACKS.where(pid, tid, 3)[0] for _role, pid, tid, _name in found}
            time.sleep(0.05)
        # Asleep in the kernel (its timer), not on a core.
        assert "S" in states
    finally:
        child.kill()
        child.wait()
    assert KSTACKS.where(str(child.pid), str(child.pid), 3) is None
    assert KSTACKS.threads(marker) == []


def test_a_spinning_thread_is_on_a_core_and_spends_user_time():
    marker = "kstacks-spin-%d" % time.monotonic_ns()
    child = subprocess.Popen([sys.executable, "-c", "while True: pass", marker, "--pull", "plain"])
    try:
        deadline, seen = time.monotonic() + 10, set()
        while time.monotonic() < deadline and ("R", "on a core") not in seen:
            for _role, pid, tid, _name in KSTACKS.threads(marker):
                seen.add(KSTACKS.where(pid, tid, 3))
            time.sleep(0.02)
        assert ("R", "on a core") in seen
        pid, tid = KSTACKS.threads(marker)[0][1:3]
        first = KSTACKS.cpu_ticks(pid, tid)
        time.sleep(0.3)
        # Spinning in Python is user time.
        assert KSTACKS.cpu_ticks(pid, tid)[0] > first[0]
    finally:
        child.kill()
        child.wait()
