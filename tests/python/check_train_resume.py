"""Kills examples/train_resume.py with SIGKILL at a random step and checks that it resumes from
the latest checkpoint and ends exactly where an uninterrupted run ends.

Run from the repository root with /usr/bin/python3 (tests/python/t-train-resume.sh does it).
KILL_AT=N picks the step after which the kill happens (default: random, printed).
"""

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import libckpt  # noqa: E402

STEPS, EVERY, DELAY = 150, 10, 0.01
EXAMPLE = os.path.join(ROOT, "examples", "train_resume.py")


def cmd(store, hold_at=None):
    c = [sys.executable, EXAMPLE, "--store", store, "--steps", str(STEPS), "--every",
         str(EVERY), "--step-delay", str(DELAY), "--device", "cpu", "--threads", "1"]
    return c + ["--hold-at", str(hold_at)] if hold_at is not None else c


def run(store):
    out = subprocess.run(cmd(store), capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd(store))} exited {out.returncode}\n{out.stdout}\n{out.stderr}")
    return out.stdout.splitlines()


def losses(lines):
    return {int(m.group(1)): m.group(2) for m in (re.match(r"step (\d+) loss (\S+)$", l) for l in lines) if m}


def main():
    tmp = tempfile.mkdtemp(prefix="libckpt-resume-")
    try:
        ref = run(os.path.join(tmp, "ref"))
        ref_done = ref[-1]
        assert ref[0] == "starting fresh" and ref_done.startswith("done "), ref[-3:]
        print("uninterrupted:", ref_done)

        kill_at = int(os.environ.get("KILL_AT") or random.SystemRandom().randint(2 * EVERY, STEPS - 10))
        print(f"killing after step {kill_at} (KILL_AT={kill_at} reproduces)")
        store = os.path.join(tmp, "run")
        # The run holds after step kill_at (waiting on its stdin) until it is killed, so the
        # kill lands at that step however fast or loaded the machine is; the background save
        # of the latest checkpoint may still be running then.
        p = subprocess.Popen(cmd(store, kill_at), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
        durable, last, seen = None, 0, []
        for line in p.stdout:
            line = line.rstrip("\n")
            seen.append(line)
            m = re.match(r"checkpoint (\d+) durable", line)
            if m:
                durable = int(m.group(1))
            m = re.match(r"step (\d+) ", line)
            if m:
                last = int(m.group(1))
            if line == f"holding at step {kill_at}":
                p.send_signal(signal.SIGKILL)
                break
        p.wait(timeout=60)
        p.stdin.close()
        for line in p.stdout:  # what it printed before the signal landed
            seen.append(line.rstrip("\n"))
            m = re.match(r"step (\d+) ", line)
            if m:
                last = int(m.group(1))
        p.stdout.close()
        if p.returncode != -signal.SIGKILL:
            sys.exit(f"FAIL: the run was not killed (exit {p.returncode}); output:\n" + "\n".join(seen))
        print(f"killed after step {last}; last checkpoint reported durable: {durable}")
        if durable is None or last != kill_at:
            sys.exit(f"FAIL: expected a durable checkpoint and the hold at step {kill_at}; "
                     f"output:\n" + "\n".join(seen))

        with libckpt.Store(store, read_only=True) as s:
            latest = s.latest_step()
            assert s.verify(latest) == [], "latest checkpoint damaged"
            steps = s.steps()
        print(f"store holds checkpoints {steps}")
        assert latest is not None and latest >= durable and latest % EVERY == 0 and latest <= last, \
            (latest, durable, last)

        again = run(store)
        if again[0] != f"resumed from checkpoint {latest}":
            sys.exit(f"FAIL: expected 'resumed from checkpoint {latest}', got {again[0]!r}")
        print(again[0])
        first = min(losses(again))
        if first != latest + 1:
            sys.exit(f"FAIL: the resumed run's first step is {first}, expected {latest + 1}")
        lr, la = losses(ref), losses(again)
        bad = [n for n in la if la[n] != lr[n]]
        if bad:
            sys.exit(f"FAIL: losses differ from the uninterrupted run at steps {bad[:5]}: "
                     f"{[(lr[n], la[n]) for n in bad[:5]]}")
        if again[-1] != ref_done:
            sys.exit(f"FAIL: final state differs:\n  uninterrupted: {ref_done}\n  resumed:       {again[-1]}")
        print("resumed:      ", again[-1])
        print("PASS: resumed from the latest checkpoint; same losses and final parameters")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
