#!/usr/bin/env python3
"""Where the threads of running processes spend their time, sampled from /proc: a profiler with no perf.

Every 1/--hz seconds, for each thread of each process whose command line holds --match, reads its
state (running, sleeping, in the disk wait) and, when sleeping, the kernel function it waits in
(/proc/PID/task/TID/wchan, and the top of /proc/PID/task/TID/stack where root may read it). The tally
says where a pull's threads are: on a core, waiting for the socket, for a file's lock, for a lane.

    python3 bench/staging/kstacks.py --match -- --pull --seconds 30 --out kstacks.json &
    python3 bench/staging_ram.py ...

Samples are taken only while a process with --pull in its command line (a bench pull) runs; the
others matched (the bench's own process, which serves the source) are sampled beside it.
Runs until --seconds pass or the file named by --stop appears. Linux only; needs python3 only.
"""

import argparse
import json
import os
import time


def threads(match):
    """[(role, pid, tid, thread name)] of every process whose command line contains `match`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as handle:
                argv = handle.read().split(b"\0")
            tids = os.listdir("/proc/%s/task" % pid)
        except OSError:
            continue
        if not any(match.encode() in arg for arg in argv):
            continue
        # A bench pull is named by its method (the argument after --pull); the bench's own process serves the source.
        role = "pull " + argv[argv.index(b"--pull") + 1].decode() if b"--pull" in argv[:-1] else "source"
        for tid in tids:
            try:
                with open("/proc/%s/task/%s/comm" % (pid, tid)) as handle:
                    name = handle.read().strip()
            except OSError:
                continue
            found.append((role, pid, tid, name))
    return found


# Clock ticks per second of /proc's CPU times (USER_HZ).
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid, tid):
    """(user, system) clock ticks one thread has spent so far, or None once it is gone."""
    try:
        with open("/proc/%s/task/%s/stat" % (pid, tid)) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        # utime and stime are fields 14 and 15 of stat(5); these fields start at field 3.
        return int(fields[11]), int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def where(pid, tid, depth):
    """(state letter, where it waits) of one thread, or None once it is gone."""
    base = "/proc/%s/task/%s/" % (pid, tid)
    try:
        with open(base + "stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
        if state == "R":
            return state, "on a core"
        with open(base + "wchan") as handle:
            wchan = handle.read().strip() or "?"
        frames = []
        try:
            with open(base + "stack") as handle:
                for line in handle:
                    parts = line.split()
                    if len(parts) >= 2:
                        frames.append(parts[1].split("+")[0])
                    if len(frames) == depth:
                        break
        except OSError:
            pass
        return state, " < ".join(frames) if frames else wchan
    except (OSError, IndexError):
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--match", required=True, help="a string the processes' command lines contain")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--hz", type=float, default=100.0)
    parser.add_argument("--depth", type=int, default=3, help="kernel frames kept per sleeping thread")
    parser.add_argument("--stop", default="", help="stop early once this file exists")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    tally, samples, by_role, deadline = {}, 0, {}, time.monotonic() + args.seconds
    # Each thread's CPU ticks when last seen, and each role's user and system ticks since.
    last, spent = {}, {}
    while time.monotonic() < deadline and not (args.stop and os.path.exists(args.stop)):
        seen = threads(args.match)
        # Only while a pull runs: the bench's own ceilings and set-up are not the pull's profile.
        if not any(role.startswith("pull") for role, _pid, _tid, _name in seen):
            time.sleep(1.0 / args.hz)
            continue
        samples += 1
        # Each role's averages are over the samples it was running in (pulls of one method at a time).
        for role in {role for role, _pid, _tid, _name in seen}:
            by_role[role] = by_role.get(role, 0) + 1
        for role, pid, tid, name in seen:
            ticks = cpu_ticks(pid, tid)
            if ticks is not None:
                before = last.get((pid, tid), ticks)
                user, system = spent.get(role, (0, 0))
                spent[role] = (user + ticks[0] - before[0], system + ticks[1] - before[1])
                last[(pid, tid)] = ticks
            found = where(pid, tid, args.depth)
            if found is None:
                continue
            key = (role, "%s %s: %s" % (name, found[0], found[1]))
            tally[key] = tally.get(key, 0) + 1
        time.sleep(1.0 / args.hz)
    total = sum(tally.values()) or 1
    ranked = sorted(tally.items(), key=lambda item: -item[1])
    doc = {
        "samples": samples,
        "samples_by_role": by_role,
        "thread_samples": total,
        # CPU seconds each role's threads spent between the samples they were seen in, in user space
        # (Python, a hash) and in the kernel (copies, locks and a waiting writer's spin).
        "cpu_s_by_role": {
            role: {"user": round(user / TICKS, 2), "system": round(system / TICKS, 2)}
            for role, (user, system) in spent.items()
        },
        "where": [
            {
                "share": round(count / total, 4),
                "threads_on_average": round(count / max(1, by_role.get(role, 0)), 2),
                "at": "%s %s" % (role, at),
            }
            for (role, at), count in ranked
        ],
    }
    with open(args.out, "w") as handle:
        json.dump(doc, handle, indent=1)
    for role, split in sorted(doc["cpu_s_by_role"].items()):
        print("%-24s CPU s: user %.2f, system %.2f" % (role, split["user"], split["system"]))
    for entry in doc["where"][:40]:
        print("%6.1f %%  %5.2f threads  %s" % (100 * entry["share"], entry["threads_on_average"], entry["at"]))


if __name__ == "__main__":
    main()
