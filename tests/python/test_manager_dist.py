#!/usr/bin/env python3
"""CheckpointManager(path, group=True): one training loop run unchanged on every rank (gloo, one
machine, init_method file://).

- 4 ranks: interval 2, max_to_keep 2, keep_period 4, async saves whose tensors change as soon as
  save() returns: exactly steps 4, 8, 10 are kept, with the values given at each save.
- 2 ranks resume: restore the latest (10) by the other split, continue to 14: 4, 8, 12, 14 are
  kept; delete(4) on every rank leaves 8, 12, 14.
- 2 ranks keep the best 2 by a metric (rank 0's metrics count), and after a restart (a new
  manager) the saved metrics still decide.
- 2 ranks: the retention's delete on rank 0 waits until every rank's save let go of the store's
  lock, even when one rank's wait() comes late.
- 2 ranks, remote=: rank 0 uploads each checkpoint; after the store is deleted, a manager on a
  new path pulls the latest from the remote and every rank restores its shard bit-exact.
- 4 ranks, save_on_preemption: rank 2's process gets SIGTERM in the middle of the loop; every rank
  saves the same step, then leaves the loop.

Run by tests/python/t-python-manager-dist.sh (exit 77 without torch.distributed's gloo).  A world
of processes is this file run with --rank/--world/--init and a role (test_dist.py's pattern).
"""

import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

TIMEOUT = 30  # the group's timeout (seconds)
ROWS, COLS = 16, 8


def matrix(step):
    import torch
    return torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS) + 1000.0 * step


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


class Loop:
    """A rank's training state: its row shard of the matrix, changed in place at every step."""

    def __init__(self, rank, world):
        import torch
        import libckpt
        self.rows = ROWS // world
        self.r0 = rank * self.rows
        self.w = torch.zeros(self.rows, COLS)
        self.state = {"w": libckpt.Shard(self.w, (ROWS, COLS), (self.r0, 0)), "step": 0}

    def step(self, step):
        self.w.copy_(matrix(step)[self.r0:self.r0 + self.rows])  # the last save's copy is done
        self.state["step"] = step
        return self.state


def manager(store, **kw):
    import libckpt
    return libckpt.CheckpointManager(store, group=True, pool_size="8M", **kw)


# ------------------------------------------------------------------------------- ranks' roles
def role_loop(store, rank, world):
    loop = Loop(rank, world)
    with manager(store, save_interval_steps=2, max_to_keep=2, keep_period=4) as mgr:
        did = [mgr.save(step, loop.step(step)) for step in range(1, 11)]
        mgr.wait_until_finished()
        result(did=did, steps=mgr.all_steps(), latest=mgr.latest_step())


def role_resume(store, rank, world):
    import torch
    loop = Loop(rank, world)
    with manager(store, save_interval_steps=2, max_to_keep=2, keep_period=4) as mgr:
        start = mgr.latest_step()
        got = mgr.restore(loop.state)
        assert torch.equal(loop.w, matrix(10)[loop.r0:loop.r0 + loop.rows]), "restored shard"
        assert loop.state["step"] == 10, loop.state
        for step in range(start + 1, 15):
            mgr.save(step, loop.step(step))
        mgr.wait_until_finished()
        kept = mgr.all_steps()
        mgr.delete(4)
        result(start=start, restored=int(got), kept=kept, after_delete=mgr.all_steps())


def role_best(store, rank, world):
    loss = {1: 5.0, 2: 1.0, 3: 4.0, 4: 2.0, 5: 6.0, 6: 3.0}
    loop = Loop(rank, world)
    kw = dict(max_to_keep=2, best_fn=lambda m: m["loss"], best_mode="min")
    with manager(store, **kw) as mgr:
        for step in range(1, 7):
            # only rank 0's metrics are kept: the others' would keep other steps
            m = {"loss": loss[step] if rank == 0 else -loss[step]}
            mgr.save(step, loop.step(step), metrics=m)
        mgr.wait_until_finished()
        first = mgr.all_steps()
    with manager(store, **kw) as mgr:  # a restart: the saved metrics still count
        mgr.save(7, loop.step(7), metrics={"loss": 0.5})
        mgr.wait_until_finished()
        result(first=first, restarted=mgr.all_steps(), best=mgr.best_step())


def role_remote(store, rank, world):
    """CheckpointManager(remote=): every rank uploads its own packs, rank 0 the manifest last, and
    wait_uploaded() returns on every rank once each is remote; after the store is lost,
    a manager on a new path pulls the latest from the remote and restores every rank's shard."""
    import shutil
    import torch
    import torch.distributed as dist
    loop = Loop(rank, world)
    url = store + "-remote"  # made by the parent
    with manager(store, remote=url) as mgr:
        for step in (1, 2, 3):
            mgr.save(step, loop.step(step))
        mgr.wait_until_finished()
        mgr.wait_uploaded(timeout=60)
        uploaded = mgr.store.remote_steps()
        states = [mgr.store.upload_state(s) for s in (1, 2, 3)]
    dist.barrier()
    if rank == 0:
        shutil.rmtree(store)  # the node is lost
    dist.barrier()
    loop.w.zero_()
    with manager(store + "-new", remote=url) as mgr:
        latest = mgr.latest_step()
        mgr.restore(loop.state)
        exact = torch.equal(loop.w, matrix(3)[loop.r0:loop.r0 + loop.rows])
    result(uploaded=uploaded, states=states, latest=latest, exact=exact)


def role_release(store, rank, world):
    """Rank 0 prunes only once every rank let go of the store's shared lock (its wait() of the
    commit returned): rank 1 delays its wait until rank 0 tried its delete, or 2 s passed."""
    import time
    from libckpt import _dsave
    flag = store + ".deleted"
    loop = Loop(rank, world)
    with manager(store, max_to_keep=1, async_save=False) as mgr:
        if rank == 0:
            real_delete = mgr.store.delete

            def delete(*a, **k):
                try:
                    return real_delete(*a, **k)
                finally:
                    open(flag, "w").close()
            mgr.store.delete = delete
        else:
            real_wait = _dsave.DistSaveHandle.wait

            def wait(h):
                deadline = time.monotonic() + 2.0  # with the barrier, rank 0 never signals
                while h.step == 2 and not os.path.exists(flag) and time.monotonic() < deadline:
                    time.sleep(0.01)
                return real_wait(h)
            _dsave.DistSaveHandle.wait = wait
        outcome = None
        for step in (1, 2):
            try:
                mgr.save(step, loop.step(step))
            except Exception as e:  # noqa: BLE001  reported
                outcome = f"{type(e).__name__}: {e}"
        result(steps=mgr.all_steps(), error=outcome)


def role_preempt(store, rank, world):
    loop = Loop(rank, world)
    step = 0
    with manager(store, save_interval_steps=1000, save_on_preemption=True) as mgr:
        for step in range(1, 41):
            if rank == 2 and step == 5:
                print("SIGNAL", flush=True)  # the parent sends SIGTERM, then a line
                sys.stdin.readline()
            mgr.save(step, loop.step(step))
            if mgr.preempted:
                break
        result(stopped=step, steps=mgr.all_steps())


ROLES = {"loop": role_loop, "resume": role_resume, "best": role_best, "preempt": role_preempt,
         "release": role_release, "remote": role_remote}


def worker(argv):
    """Runs the roles named (role:store,...) one after the other: starting torch in 4 processes
    costs more than the roles themselves."""
    import torch.distributed as dist
    rank, world, init, roles = int(argv[2]), int(argv[4]), argv[6], argv[7]
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT))
    for item in roles.split(","):
        role, store = item.split(":", 1)
        ROLES[role](store, rank, world)
    dist.barrier()
    dist.destroy_process_group()


# ------------------------------------------------------------------------------- the parent
def run_world(n, roles, signal_rank=None):
    """Runs n ranks through roles [(role, store)]; returns, in rank order, the list of their
    results (exits naming a rank that failed).  signal_rank: that rank's "SIGNAL" line is
    answered by SIGTERM, then a line on its stdin."""
    what = ", ".join(r for r, _ in roles)
    fd, init = tempfile.mkstemp(prefix="ckpt-init-")
    os.close(fd)
    os.unlink(init)  # the file store creates it
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--world", str(n),
                               "--init", init, ",".join(f"{r}:{s}" for r, s in roles)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(n)]
    out = []
    try:
        if signal_rank is not None:
            p = procs[signal_rank]
            early = []
            for line in p.stdout:  # ends at "SIGNAL", or at its exit
                early.append(line)
                if line.strip() == "SIGNAL":
                    p.send_signal(signal.SIGTERM)
                    p.stdin.write("\n")
                    p.stdin.flush()
                    break
        for r, p in enumerate(procs):
            # input="" closes its stdin; a guard against a hang only, no timing is asserted
            text, _ = p.communicate(input="", timeout=4 * TIMEOUT + 60)
            if r == signal_rank:
                text = "".join(early) + text
            res = [json.loads(ln[7:]) for ln in text.splitlines() if ln.startswith("RESULT ")]
            if p.returncode != 0 or len(res) != len(roles):
                sys.exit(f"FAIL: {what}: rank {r} exited {p.returncode}:\n{text}")
            out.append(res)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if os.path.exists(init):
            os.unlink(init)
    return out


def same(outs, what):
    if any(o != outs[0] for o in outs):
        sys.exit(f"FAIL: {what}: the ranks disagree: {outs}")
    return outs[0]


def check(got, want, what):
    if got != want:
        sys.exit(f"FAIL: {what}: {got}, expected {want}")
    print(f"ok: {what}: {got}")


def main():
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        print("skip: this torch has no torch.distributed gloo backend")
        return 77
    import torch
    import libckpt
    with tempfile.TemporaryDirectory() as tmp:
        store, best, pre, rel = (os.path.join(tmp, n) for n in ("store", "best", "preempt", "rel"))
        outs = run_world(4, [("loop", store), ("preempt", pre)], signal_rank=2)
        res = same([o[0] for o in outs], "4-rank loop")
        check(res["did"], [False, True] * 5, "4 ranks: saves every 2nd step")
        check(res["steps"], [4, 8, 10], "4 ranks: kept (newest 2, every 4th) on every rank")
        with libckpt.Store(store, read_only=True) as st:
            check(st.steps(), [4, 8, 10], "4 ranks: the store's list")
            for s in (4, 8, 10):  # async: each holds what it was given, not the next step's
                assert torch.equal(st.load(s)["w"], matrix(s)), f"step {s}: wrong values"
        print("ok: 4 ranks: each async checkpoint holds the values given to its save")
        res = same([o[1] for o in outs], "preemption")
        if not 5 <= res["stopped"] < 40 or res["steps"] != [res["stopped"]]:
            sys.exit(f"FAIL: SIGTERM on rank 2 at step 5: {res}")
        with libckpt.Store(pre, read_only=True) as st:
            check(st.steps(), [res["stopped"]], "SIGTERM on rank 2: every rank saved that step")
        rem = os.path.join(tmp, "rem")
        os.makedirs(rem + "-remote")
        outs = run_world(2, [("resume", store), ("best", best), ("release", rel), ("remote", rem)])
        res = same([o[0] for o in outs], "2-rank resume")
        check((res["start"], res["restored"]), (10, 10), "2 ranks: latest_step and restore")
        check(res["kept"], [4, 8, 12, 14], "2 ranks: kept after continuing to step 14")
        check(res["after_delete"], [8, 12, 14], "2 ranks: delete(4) on every rank")
        with libckpt.Store(store, read_only=True) as st:
            check(st.steps(), [8, 12, 14], "2 ranks: the store's list")
        res = same([o[1] for o in outs], "best_fn")
        check(res["first"], [2, 4, 6], "best 2 by rank 0's loss (2, 4) and the latest (6)")
        check((res["restarted"], res["best"]), ([2, 7], 7), "after a restart, by saved metrics")
        res = same([o[2] for o in outs], "retention after the lock's release")
        check(res, {"steps": [2], "error": None}, "rank 0 prunes once every rank's wait returned")
        res = same([o[3] for o in outs], "remote")
        check(res, {"uploaded": [1, 2, 3], "states": ["remote"] * 3, "latest": 3, "exact": True},
              "remote=: every rank's packs uploaded, the latest restored on a replacement store")
    print("python manager dist ok")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        worker(sys.argv)
        sys.exit(0)
    sys.exit(main())
