"""examples/train_ddp_resume.py: 4 gloo processes, one SIGKILLed right after the checkpoint of
step KILL_AT was started; the others stop; the run resumes on 2 processes from the latest
checkpoint with exactly the parameters and the (resharded) EMA saved there, and ends where an
uninterrupted 4-process run ends (up to float rounding: 2 processes sum the gradients in
another order).

Run from the repository root with /usr/bin/python3 (tests/python/t-train-ddp-resume.sh).
"""

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import libckpt  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "train_ddp_resume.py")
STEPS, EVERY, KILL_AT = 40, 10, 30


def run(store, nproc, *extra, expect_ok=True):
    c = [sys.executable, EXAMPLE, "--store", store, "--nproc", str(nproc), "--steps", str(STEPS),
         "--every", str(EVERY), "--timeout", "20", *extra]
    # a guard against a hang only; nothing here depends on how long a run takes
    p = subprocess.run(c, capture_output=True, text=True, timeout=600)
    if (p.returncode == 0) != expect_ok:
        sys.exit(f"FAIL: {' '.join(c)} exited {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}")
    return p.stdout.splitlines()


def saved(lines):
    return {int(m.group(1)): (m.group(2), m.group(3)) for m in
            (re.match(r"checkpoint (\d+) saved digest (\S+) ema (\S+)$", ln) for ln in lines) if m}


def losses(lines):
    return {int(m.group(1)): float(m.group(2)) for m in
            (re.match(r"step (\d+) loss (\S+)$", ln) for ln in lines) if m}


def main():
    tmp = tempfile.mkdtemp(prefix="libckpt-ddp-")
    try:
        ref = run(os.path.join(tmp, "ref"), 4)
        assert ref[0] == "starting fresh on 4 processes" and ref[-1].startswith("done "), ref[-3:]
        print("uninterrupted, 4 processes:", ref[-1])

        store = os.path.join(tmp, "run")
        killed = run(store, 4, "--die-at", str(KILL_AT), "--die-rank", "1", expect_ok=False)
        sv = saved(killed)
        print(f"rank 1 killed after step {KILL_AT}; checkpoints started: {sorted(sv)}")
        with libckpt.Store(store, read_only=True) as s:
            steps = s.steps()
            latest = s.latest_step()
            assert s.verify(latest) == [], "the latest checkpoint is damaged"
        # the checkpoint of step 20 was waited for before 30 was started; 30's commit was in
        # flight when rank 1 died: committed by every rank, or not at all
        assert steps in ([10, 20], [10, 20, 30]), steps
        print(f"store holds checkpoints {steps}")

        again = run(store, 2)
        m = re.match(r"resumed from checkpoint (\d+) on 2 processes digest (\S+) ema (\S+)$", again[0])
        if not m or int(m.group(1)) != latest:
            sys.exit(f"FAIL: expected a resume from checkpoint {latest} on 2 processes: {again[0]!r}")
        if (m.group(2), m.group(3)) != sv[latest]:
            sys.exit(f"FAIL: resumed with digest {m.group(2)} ema {m.group(3)}, saved "
                     f"{sv[latest][0]} ema {sv[latest][1]}")
        print(again[0], "(the parameters and the EMA saved by 4 ranks, resharded onto 2)")
        lr, la = losses(ref), losses(again)
        assert min(la) == latest + 1, min(la)
        bad = [n for n in la if not math.isclose(la[n], lr[n], rel_tol=1e-3, abs_tol=1e-6)]
        if bad:
            sys.exit(f"FAIL: the resumed run's losses differ from the uninterrupted run's at "
                     f"{bad[:5]}: {[(lr[n], la[n]) for n in bad[:5]]}")
        print("resumed, 2 processes:      ", again[-1])
        print("PASS: resumed on 2 processes from the 4-process checkpoint")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
