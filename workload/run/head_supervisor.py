"""The local cluster's process session, and the small supervisor that ends it when the local run is gone.

`python -m workload.local` starts `python -I workload/run/head_supervisor.py ray start --head --block ...` in a new
session, with a pipe on its stdin whose other end only the local run holds. The supervisor runs the command and
reads the pipe: when the local run ends, however it ends (its own clean-up, a closed terminal, SIGKILL, a crash),
the kernel closes its end and the read returns; the supervisor then stops every process of its session, which is
the whole cluster: Ray's processes take process groups of their own but keep the session. Neither a parent-death
signal (PR_SET_PDEATHSIG reaches one child, not the raylet's workers) nor polling a pid (reused) does that.

Standard library only, and run by path with -I: it must start without the project on sys.path.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

# `ray start --block` itself lingers after SIGTERM; Ray processes are safe to SIGKILL (`ray stop --force` does).
STOP_GRACE_S = 1
# kill() only queues SIGKILL: a process releases its ports when the kernel next runs it, later on a busy machine.
KILL_WAIT_S = 10


def session_members(session_id: int) -> list[int]:
    """Live (not zombie) processes of a session, from /proc; on systems without /proc, the leader alone."""
    if not os.path.isdir("/proc"):
        return [session_id]
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                stat = file.read()
        except OSError:
            continue
        # Fields after the parenthesised command name: state, ppid, pgrp, session, ...
        state, _, _, session = stat[stat.rindex(")") + 2 :].split()[:4]
        if int(session) == session_id and state != "Z":
            members.append(int(entry))
    return members


def signal_session(session_id: int, sig: signal.Signals, spare: int | None = None) -> None:
    for pid in session_members(session_id):
        if pid == spare:
            continue
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_session(session_id: int, spare: int | None = None, reap=lambda: None) -> None:
    """SIGTERM to every process of the session (but `spare`), then SIGKILL to what is left after the grace period;
    returns once they are gone (their ports closed), or after KILL_WAIT_S more. `reap` collects exited children, so
    they stop counting as members."""
    signal_session(session_id, signal.SIGTERM, spare)
    _wait_for_members_to_go(session_id, spare, reap, STOP_GRACE_S)
    signal_session(session_id, signal.SIGKILL, spare)
    _wait_for_members_to_go(session_id, spare, reap, KILL_WAIT_S)


def _wait_for_members_to_go(session_id: int, spare: int | None, reap, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while set(session_members(session_id)) - {spare} and time.monotonic() < deadline:
        time.sleep(0.05)
        reap()


def main(command: list[str]) -> int:
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL)

    def stop_when_the_run_is_gone() -> None:
        while os.read(sys.stdin.fileno(), 4096):  # b"": every writer has closed its end or died
            pass
        stop_session(os.getsid(0), spare=os.getpid(), reap=child.poll)
        os._exit(0)

    threading.Thread(target=stop_when_the_run_is_gone, daemon=True).start()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
