#!/usr/bin/env python3
"""Multi-rank checkpoints from torch.distributed (gloo, one machine, init_method file://):

- 4 ranks save row-sharded (libckpt.Shard), replicated and single-rank tensors; the second step
  changes one row of one rank's shard and writes exactly that chunk (per-rank stats); a
  save_async step whose tensors change right after its snapshot keeps the values it was given
  (the part goes through the pinned pipeline; the commit runs on libckpt's thread).
- One process (no torch.distributed) loads the consolidated global tensors (Store.load), and
  `ckptctl export` of the multi-rank checkpoint (consolidated).
- 2 ranks restore the 4-rank checkpoint by column shards (into non-contiguous views) and the
  replicated tensors, whole, on every rank.
- 4 ranks of one node restore entries they all want whole (replicated, sharded, single-rank):
  each is read from the store by one rank and broadcast (the bytes read by all ranks about those
  of one rank without sharing), bit-identical; a damaged chunk raises ChecksumError everywhere.
- A rank SIGKILLed in the middle of its save (after its part is durable, at libckpt's first
  collective; and while the plan is exchanged): every other rank raises naming it, no checkpoint
  is listed, the store verifies, and gc removes the dead save's parts.
- A rank that hangs (alive, never saving): the others raise once the group's timeout passed.
- Absurd shard shapes (huge, negative, overflowing) are libckpt errors on save and load, and a
  shard table that does not tile its tensor fails the load (CorruptError), not zeros.
- Failures on a live rank (a state it cannot save; a replicated tensor of another dtype; shards
  that do not cover the global tensor, found by rank 0 at the commit): every rank raises, naming
  the rank, and the next save works.

Run by tests/python/t-python-dist.sh (exit 77 without torch.distributed's gloo).  A world of
processes is this file run with --rank/--world/--init and a role.
"""

import datetime
import os
import signal
import struct
import json
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

TIMEOUT = 20  # the group's timeout (seconds): a dead rank makes the others raise within it
GROWS, GCOLS = 256, 1024  # the sharded matrix: 1 MiB of float32, 64 KiB chunks


def matrix(step):
    import torch
    w = torch.arange(GROWS * GCOLS, dtype=torch.float32).reshape(GROWS, GCOLS) * 0.5
    if step >= 2:
        w[64] += 1.0  # step 2: one row of rank 1's shard (the first chunk of its 4)
    if step >= 3:
        w[128:192] += 2.0  # step 3: all of rank 2's shard
    return w


def bias():
    import torch
    return torch.linspace(-1, 1, 256 * 256, dtype=torch.float32).reshape(256, 256)


def tail():
    import torch
    return torch.arange(24, dtype=torch.float64).reshape(6, 4)


MROWS = 64


def mesh_tensor():
    import torch
    return torch.arange(MROWS * GCOLS, dtype=torch.float32).reshape(MROWS, GCOLS) - 7.0


def only(r):
    import torch
    return torch.arange(1000, dtype=torch.int32) + 1000 * r


def state_for(rank, world, step):
    import libckpt
    rows = GROWS // world
    w = matrix(step)[rank * rows:(rank + 1) * rows].clone()
    t0, t1 = min(2 * rank, 6), min(2 * rank + 2, 6)  # rows of tail: 2, 2, 2, and none on rank 3
    # a 2 x 2 mesh's tensor (hybrid sharding): rows sharded over rank // 2, replicated over
    # rank % 2, so each box has two holders, each of which writes half of it
    half = MROWS // 2
    m = mesh_tensor()[(rank // 2) * half:(rank // 2 + 1) * half].clone()
    mesh = {"mesh": libckpt.Shard(m, global_shape=(MROWS, GCOLS),
                                  offset=((rank // 2) * half, 0))} if world == 4 else {}
    return {**mesh,
            "w": libckpt.Shard(w, global_shape=(GROWS, GCOLS), offset=(rank * rows, 0)),
            "tail": libckpt.Shard(tail()[t0:t1].clone(), global_shape=(6, 4), offset=(t0, 0)),
            "bias": bias(), f"only{rank}": only(rank), "step": step,
            "opt": {"lr": 0.1, "betas": (0.9, 0.99)}}


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


# ------------------------------------------------------------------------------- ranks' roles
def role_save(store_path, rank, world):
    import torch
    import libckpt
    with libckpt.Store(store_path) as st:
        stats = {}
        for step in (1, 2):
            stats[step] = st.save(state_for(rank, world, step), step).chunks_new
        s3 = state_for(rank, world, 3)
        # tags of a multi-rank save: rank 0's are the checkpoint's
        h = st.save_async(s3, 3, metadata={"note": "async"},
                          tags=["async", "rank0" if rank == 0 else f"rank{rank}"])
        h.wait_snapshot()  # copied into the pinned pool: no clone of the state
        s3["w"].tensor.add_(100.0)  # the caller's tensors change while the commit runs
        s3["bias"].zero_()
        stats[3] = h.wait().chunks_new
        for step in (2, 3):
            want = state_for(rank, world, step)
            want_tail, want_off = want["tail"].tensor, want["tail"].offset
            rows = GROWS // world
            got = {"w": libckpt.Shard(torch.zeros(rows, GCOLS), (GROWS, GCOLS), (rank * rows, 0)),
                   "bias": torch.zeros(256, 256), f"only{rank}": torch.zeros(1000, dtype=torch.int32),
                   "step": None, "opt": {"lr": None, "betas": None},
                   "tail": libckpt.Shard(torch.zeros(want_tail.shape, dtype=torch.float64), (6, 4),
                                         want_off)}
            half = MROWS // 2
            got["mesh"] = libckpt.Shard(torch.zeros(half, GCOLS), (MROWS, GCOLS),
                                        ((rank // 2) * half, 0))
            res = st.restore(got, step)
            assert torch.equal(got["mesh"].tensor, want["mesh"].tensor), f"step {step}: mesh"
            assert torch.equal(got["tail"].tensor, want_tail)
            assert int(res) == step, res
            assert torch.equal(got["w"].tensor, want["w"].tensor), f"step {step}: shard differs"
            assert torch.equal(got["bias"], bias()), f"step {step}: replicated tensor differs"
            assert torch.equal(got[f"only{rank}"], only(rank))
            assert got["step"] == step and got["opt"] == {"lr": 0.1, "betas": (0.9, 0.99)}, got
        assert st.metadata(3) == {"note": "async"}, st.metadata(3)
    result(rank=rank, new_chunks=stats)


FW, FH, FM = (7, 9, 5), (6, 100), (4, 8)  # the flattened-range tensors' global shapes


def flat_values(shape, base):
    import torch
    n = 1
    for s in shape:
        n *= s
    return torch.arange(n, dtype=torch.float32).reshape(shape) + base


def flat_state(rank, world):
    """FSDP1-style state: 'w' as uneven ranges of 4 ranks (or an even split of another world),
    'h' as two ranges each held by two ranks alike (replicated), 'm' as a box on rank 0 beside
    ranges on ranks 1 to 3 (rank 3's empty)."""
    import libckpt
    w, h, m = flat_values(FW, 0.5).flatten(), flat_values(FH, 1000.0).flatten(), \
        flat_values(FM, -50.0)
    cut = [0, 50, 151, 152, 315] if world == 4 else \
        [315 * r // world for r in range(world + 1)]
    st = {"w": libckpt.FlatShard(w[cut[rank]:cut[rank + 1]].clone(), FW, cut[rank])}
    if world == 4:
        h0 = (rank // 2) * 300
        st["h"] = libckpt.FlatShard(h[h0:h0 + 300].clone(), FH, h0)
        if rank == 0:
            st["m"] = libckpt.Shard(m[0:2].clone(), FM, (0, 0))
        else:
            lo, hi = {1: (16, 20), 2: (20, 32), 3: (32, 32)}[rank]
            st["m"] = libckpt.FlatShard(m.flatten()[lo:hi].clone(), FM, lo)
    return st


def role_flat(store_path, rank, world):
    """Saves flat_state twice (the second writes nothing new), then restores ranges of another
    split, a column box and a whole range into FlatShard and Shard targets."""
    import torch
    import libckpt
    new = []
    with libckpt.Store(store_path) as st:
        for step in (1, 2):
            new.append(st.save(flat_state(rank, world), step, tags=["flat"]).chunks_new)
        w = flat_values(FW, 0.5)
        lo = 80 * rank
        got = {"w": libckpt.FlatShard(torch.zeros(min(80, 315 - lo)), FW, lo),
               "h": libckpt.FlatShard(torch.zeros(7), FH, 297 + rank),
               "m": libckpt.Shard(torch.zeros(4, 3), FM, (0, 1 + rank))}
        st.restore(got, 2)
        want = w.flatten()[lo:lo + got["w"].tensor.numel()]
        assert torch.equal(got["w"].tensor, want), (rank, got["w"].tensor[:5], want[:5])
        assert torch.equal(got["h"].tensor, flat_values(FH, 1000.0).flatten()[297 + rank:304 + rank])
        assert torch.equal(got["m"].tensor, flat_values(FM, -50.0)[:, 1 + rank:4 + rank])
    result(rank=rank, new_chunks=new)


def role_flat3(store_path, rank, world):
    """Another world size restores the 4-rank ranges as its own even ranges."""
    import torch
    import libckpt
    with libckpt.Store(store_path, read_only=True) as st:
        want = flat_state(rank, world)["w"]
        got = {"w": libckpt.FlatShard(torch.zeros_like(want.tensor), FW, want.offset)}
        st.restore(got, 1, strict=False)
        assert torch.equal(got["w"].tensor, want.tensor), rank
    result(rank=rank)


def check_flat(tmp):
    import torch
    import libckpt
    store = os.path.join(tmp, "flat")
    libckpt.Store(store, create=True, chunk_size="64K").close()
    outs = run_world(4, "flat", store)
    check_world(outs, "4 ranks save flattened ranges (uneven, replicated, beside a box) and "
                "restore other ranges and boxes")
    assert all(o[1]["new_chunks"][1] == 0 for o in outs), [o[1]["new_chunks"] for o in outs]
    with libckpt.Store(store, read_only=True) as st:
        s = st.load(1)
        assert torch.equal(s["w"], flat_values(FW, 0.5)), "load: w"
        assert torch.equal(s["h"], flat_values(FH, 1000.0)), "load: h"
        assert torch.equal(s["m"], flat_values(FM, -50.0)), "load: m"
        assert st.verify(1) == [] and st.info(1)["tags"] == ["flat"]
        names = [t["name"] for t in st.tensors(1)]
        assert any("#" in n for n in names), names  # a rank's range is several boxes
    check_world(run_world(3, "flat3", store), "3 ranks restore the 4-rank ranges as their own")
    print("ok: flattened ranges: saved, loaded whole, restored by another split and world size")


def role_restore2(store_path, rank, world):
    import torch
    import libckpt
    cols = GCOLS // world
    with libckpt.Store(store_path, read_only=True) as st:
        for step in (1, 3):
            base = torch.zeros(cols, GROWS)
            got = {"w": libckpt.Shard(base.t(), global_shape=(GROWS, GCOLS), offset=(0, rank * cols)),
                   "bias": torch.zeros(256, 256), f"only{rank}": torch.zeros(1000, dtype=torch.int32),
                   "only3": torch.zeros(1000, dtype=torch.int32), "step": None, "opt": {},
                   "tail": libckpt.Shard(torch.zeros(3, 4, dtype=torch.float64), (6, 4), (3 * rank, 0))}
            # the mesh tensor's four half-boxes, restored as 2 column blocks
            got["mesh"] = libckpt.Shard(torch.zeros(MROWS, cols), (MROWS, GCOLS), (0, rank * cols))
            res = st.restore(got, step, strict=False)
            assert torch.equal(got["mesh"].tensor, mesh_tensor()[:, rank * cols:(rank + 1) * cols])
            assert not got["w"].tensor.is_contiguous()
            want = matrix(step)[:, rank * cols:(rank + 1) * cols]
            assert torch.equal(got["w"].tensor, want), f"step {step}: column shard differs"
            assert torch.equal(got["bias"], bias())
            assert torch.equal(got["only3"], only(3)) and torch.equal(got[f"only{rank}"], only(rank))
            assert got["step"] == step
            assert torch.equal(got["tail"].tensor, tail()[3 * rank:3 * rank + 3])
            left = sorted(res.not_restored)
            assert left == sorted(f"only{r}" for r in range(4) if r not in (rank, 3)) + \
                ["opt.betas", "opt.lr"], left
    result(rank=rank, ok=True)


def role_kill(store_path, rank, world, where):
    import libckpt
    import libckpt.dist as D
    victim = 2
    state = state_for(rank, world, 4)
    if rank == victim and where == "commit":
        # dies inside ckpt_dist_save_commit: its part is durable, the global commit not done
        def die(self, *a):
            os.kill(os.getpid(), signal.SIGKILL)
        D._Comm._allgather = die
    if rank == victim and where == "plan":
        class Dies:
            def state_dict(self):
                os.kill(os.getpid(), signal.SIGKILL)

            def load_state_dict(self, sd):
                pass
        state["dies"] = Dies()
    with libckpt.Store(store_path) as st:
        t0 = time.monotonic()
        try:
            st.save(state, 4)
        except libckpt.CkptError as e:
            result(rank=rank, raised=str(e), seconds=round(time.monotonic() - t0, 1))
            return
    result(rank=rank, raised=None)


def role_hang(store_path, rank, world):
    """Rank 2 hangs (alive, never calls save): the others raise once the group's timeout passed."""
    import libckpt
    libckpt.dist_group()  # made by every rank: rank 2 hangs with the group there
    with libckpt.Store(store_path) as st:
        if rank == 2:
            sys.stdin.readline()  # until the parent closes our stdin (after the others are done)
            return
        try:
            st.save(state_for(rank, world, 4), 4)
        except libckpt.CkptError as e:
            result(rank=rank, raised=str(e))
            return
    result(rank=rank, raised=None)


def role_errors(store_path, rank, world):
    """Failures on one rank that leave it alive: every rank raises, naming it, and the group's
    collectives stay in step (the next save works)."""
    import torch
    import libckpt
    seen = []
    with libckpt.Store(store_path) as st:
        bad = state_for(rank, world, 5)
        if rank == 1:
            bad["oops"] = object()  # cannot be saved: rank 1 fails while preparing
        try:
            st.save(bad, 5)
            seen.append(None)
        except (TypeError, libckpt.CkptError) as e:
            seen.append(str(e))
        odd = state_for(rank, world, 5)
        if rank == 3:
            odd["bias"] = odd["bias"].double()  # a replicated tensor of another dtype
        try:
            st.save(odd, 5)
            seen.append(None)
        except libckpt.CkptError as e:
            seen.append(str(e))
        gap = state_for(rank, world, 5)
        # rows [2r, 2r + 1) of 8: the boxes leave rows uncovered; rank 0 finds it at the commit
        gap["gap"] = libckpt.Shard(torch.ones(1, 4), global_shape=(8, 4), offset=(2 * rank, 0))
        try:
            st.save(gap, 5)
            seen.append(None)
        except libckpt.CkptError as e:
            seen.append(str(e))
        # a failure on one rank after the plan, while it adds its tensors: it joins the commit
        # with its failure (no exchange of its own), in save() and in save_async()
        import libckpt._dsave as dsave
        real = dsave._order_streams
        if rank == 2:
            def broken(*a):
                raise RuntimeError("injected: adding the tensors failed")
            dsave._order_streams = broken
        for how in ("save", "save_async"):
            try:
                if how == "save":
                    st.save(state_for(rank, world, 5), 5)
                else:
                    st.save_async(state_for(rank, world, 5), 5).wait()
                seen.append(None)
            except (RuntimeError, libckpt.CkptError) as e:
                seen.append(f"{type(e).__name__}: {e}")
            assert 5 not in st.steps(), (how, st.steps())
        dsave._order_streams = real
        st.save(state_for(rank, world, 5), 5)
        got = {"w": libckpt.Shard(torch.zeros(GROWS // world, GCOLS), (GROWS, GCOLS),
                                  (rank * GROWS // world, 0))}
        st.restore(got, 5, strict=False)
        assert torch.equal(got["w"].tensor, state_for(rank, world, 5)["w"].tensor)
    result(rank=rank, errors=seen)


def role_repeat(store_path, rank, world):
    """Saves of one layout need no exchange of the plan after the first (its digests only); a
    layout that changes on one rank makes every rank exchange it again; what is saved either
    way restores bit for bit, and rank 0's metadata knows every rank's entries."""
    import torch
    import libckpt
    import libckpt.dist as D
    exchanges = {}
    real = D.DistGroup.gather_object

    def counting(self, obj, what):
        if "exchanging the plan" in what:
            exchanges[what.split(":")[0]] = exchanges.get(what.split(":")[0], 0) + 1
        return real(self, obj, what)
    D.DistGroup.gather_object = counting
    rows = GROWS // world

    def state(step):
        # steps 1-3: one layout, a scalar that changes alike on every rank; steps 4-5: no
        # such scalar, and rank 2 has entries of its own (a tree rank 0 knows from step 4)
        s = {"w": libckpt.Shard(matrix(step)[rank * rows:(rank + 1) * rows].clone(),
                                global_shape=(GROWS, GCOLS), offset=(rank * rows, 0)),
             "bias": bias() + step, "opt": {"lr": 0.1 if step >= 4 else 0.1 * step}}
        if step <= 3:
            s["step"] = step
        if step >= 4 and rank == 2:
            s["extra2"] = {"t": torch.full((10,), float(step)), "seed": 7}
        return s
    with libckpt.Store(store_path) as st:
        for step in (1, 2, 3, 4, 5):
            if step == 3:
                st.save_async(state(step), step).wait()
            else:
                st.save(state(step), step)
        for step in (1, 2, 3, 4, 5):
            got = {"w": libckpt.Shard(torch.zeros(rows, GCOLS), (GROWS, GCOLS), (rank * rows, 0)),
                   "bias": torch.zeros(256, 256), "opt": {"lr": None}}
            if step <= 3:
                got["step"] = None
            st.restore(got, step, strict=False)
            want = state(step)
            assert torch.equal(got["w"].tensor, want["w"].tensor), (rank, step)
            assert torch.equal(got["bias"], want["bias"]), (rank, step)
            assert got.get("step") == want.get("step"), (rank, step)
            assert got["opt"]["lr"] == want["opt"]["lr"], (rank, step, got["opt"])
    D.DistGroup.gather_object = real
    result(rank=rank, exchanges=exchanges)


def check_repeat(tmp):
    import torch
    import libckpt
    store = os.path.join(tmp, "repeat")
    libckpt.Store(store, create=True).close()
    outs = run_world(4, "repeat", store)
    check_world(outs, "4 ranks save one layout 3 times, then one that changes on rank 2, twice")
    ex = [o[1]["exchanges"] for o in outs]
    assert all(e == {"checkpoint 1": 1, "checkpoint 4": 1} for e in ex), \
        f"full exchanges of the plan per rank {ex}: expected at checkpoints 1 and 4 only"
    with libckpt.Store(store, read_only=True) as st:
        got = st.load(5)
        assert sorted(got) == ["bias", "extra2", "opt", "w"], sorted(got)
        assert torch.equal(got["extra2"]["t"], torch.full((10,), 5.0)), got
        assert st.load(3)["step"] == 3 and sorted(st.load(2)) == ["bias", "opt", "step", "w"]
        assert got["extra2"]["seed"] == 7 and tuple(got["w"].shape) == (GROWS, GCOLS)
    print("ok: saves of an unchanged layout exchange the plan's digests only (full exchanges "
          "at checkpoints 1 and 4, where rank 2's layout changed); every step restores, and "
          "load() of step 5 has rank 2's entries")


def role_share(store_path, rank, world, mode):
    """Entries every rank restores whole, read once per node (mode "on", the default) or by
    every rank ("off"); "damage": the one entry is damaged in the store."""
    import numpy as np
    import torch
    import libckpt
    with libckpt.Store(store_path, read_only=True) as st:
        if mode == "damage":
            try:
                st.restore({"bias": torch.zeros(256, 256)}, 3, strict=False)
            except libckpt.CkptError as e:
                result(rank=rank, error=type(e).__name__, msg=str(e)[:300])
                return
            result(rank=rank, error=None)
            return
        # a replicated tensor (into a transposed view on rank 2: received through a buffer),
        # a sharded one restored whole, a single-rank one into a numpy array
        bias_t = torch.zeros(256, 256).t() if rank == 2 else torch.zeros(256, 256)
        got = {"bias": bias_t, "w": torch.zeros(GROWS, GCOLS),
               "only0": np.zeros(1000, dtype=np.int32)}
        res = st.restore(got, 3, strict=False, share_replicated=mode == "on")
        ok = (torch.equal(got["bias"], bias()) and torch.equal(got["w"], matrix(3)) and
              np.array_equal(got["only0"], only(0).numpy()))
    result(rank=rank, ok=ok, stats=res.stats)


def worker(argv):
    import torch.distributed as dist
    rank, world, init, role, store = int(argv[2]), int(argv[4]), argv[6], argv[7], argv[8]
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT))
    fn = {"save": role_save, "restore2": role_restore2, "kill": role_kill,
          "errors": role_errors, "hang": role_hang, "flat": role_flat, "flat3": role_flat3,
          "share": role_share, "repeat": role_repeat}[role]
    fn(store, rank, world, *argv[9:])
    if role not in ("kill", "hang"):
        dist.barrier()
        dist.destroy_process_group()
        return
    # The group has lost rank 2 (dead or stuck): no barrier or destroy can complete, and gloo's
    # teardown at interpreter exit may abort ("terminate called without an active exception").
    # So the survivors wait until every one of them has its result (a rank that left early would
    # change the error the others see from "rank 2" to itself), then leave without that teardown.
    if rank != 2:
        survivors_done(init, rank, world)
    sys.stdout.flush()
    os._exit(0)


def survivors_done(init, rank, world):
    """A barrier of the ranks other than 2 through files next to the group's file store."""
    open(f"{init}.done{rank}", "w").close()
    others = [f"{init}.done{r}" for r in range(world) if r != 2]
    while not all(os.path.exists(f) for f in others):
        time.sleep(0.05)  # polls a condition; the parent's guard bounds a rank that never comes


# ------------------------------------------------------------------------------- the parent
def run_world(n, role, store, *args, hang=None):
    """Runs n ranks; returns [(returncode, {result} or None, output)] in rank order."""
    fd, init = tempfile.mkstemp(prefix="ckpt-init-")
    os.close(fd)
    os.unlink(init)  # the file store creates it
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--world", str(n),
                               "--init", init, role, store] + list(args), env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for r in range(n)]
    out = [None] * n
    try:
        # the ranks that are not stuck first; then stdin closes, which ends role_hang's rank 2
        for r in sorted(range(n), key=lambda r: r == hang):
            p = procs[r]
            # input="" closes its stdin; a guard against a hang only, no timing is asserted
            text, _ = p.communicate(input="", timeout=8 * TIMEOUT + 120)
            res = [json.loads(ln[7:]) for ln in text.splitlines() if ln.startswith("RESULT ")]
            out[r] = (p.returncode, res[0] if res else None, text)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in [init] + [f"{init}.done{r}" for r in range(n)]:
            if os.path.exists(f):
                os.unlink(f)
    return out


def check_world(outs, what):
    for r, (rc, res, text) in enumerate(outs):
        if rc != 0 or res is None:
            sys.exit(f"FAIL: {what}: rank {r} exited {rc}:\n{text}")
    print(f"ok: {what}")


def check_load(store):
    import torch
    import libckpt
    with libckpt.Store(store, read_only=True) as st:
        for step in (1, 2, 3):
            s = st.load(step)
            assert torch.equal(s["w"], matrix(step)), f"load({step}): the global matrix differs"
            assert torch.equal(s["bias"], bias()) and torch.equal(s["tail"], tail())
            assert torch.equal(s["mesh"], mesh_tensor()), f"load({step}): the mesh tensor differs"
            for r in range(4):
                assert torch.equal(s[f"only{r}"], only(r))
            assert s["step"] == step and s["opt"] == {"lr": 0.1, "betas": (0.9, 0.99)}
        assert st.info(3)["tags"] == ["async", "rank0"], st.info(3)
        assert [i["tags"] for i in st.list()] == [[], [], ["async", "rank0"]], st.list()
        part = st.load(2, keys="w")
        assert list(part) == ["w"] and torch.equal(part["w"], matrix(2))
    print("ok: Store.load gives the consolidated global tensors of steps 1 to 3")


def check_mesh(store):
    """Each of the two holders of a box of the mesh tensor saved half of it."""
    p = subprocess.run([os.path.join(ROOT, os.environ.get("B", "build"), "bin", "ckptctl"),
                        "show", store, "1", "--json"], capture_output=True, text=True)
    assert p.returncode == 0, f"ckptctl show failed (exit {p.returncode}): {p.stderr.strip()}"
    g = [t for t in json.loads(p.stdout)["global_tensors"] if t["name"] == "mesh"][0]
    got = sorted((s["rank"], s["offsets"][0], s["lengths"][0]) for s in g["shards"])
    q = MROWS // 4
    assert got == [(r, q * r, q) for r in range(4)], f"mesh's shards: {got}"
    print(f"ok: the 2 x 2 mesh's replicated boxes were split: (rank, first row, rows) {got}")


def check_export(store, tmp):
    """ckptctl export of a multi-rank checkpoint writes the consolidated global tensors."""
    import torch
    out = os.path.join(tmp, "step2.safetensors")
    p = subprocess.run([os.path.join(ROOT, os.environ.get("B", "build"), "bin", "ckptctl"),
                        "export", store, "2", "-o", out], capture_output=True, text=True)
    assert p.returncode == 0, f"ckptctl export failed (exit {p.returncode}): {p.stderr.strip()}"
    with open(out, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    assert "w" in hdr and not any("@" in k for k in hdr), \
        f"ckptctl export: not consolidated: {sorted(hdr)}"
    w = hdr["w"]
    assert w["dtype"] == "F32" and w["shape"] == [GROWS, GCOLS], w
    a, b = w["data_offsets"]
    got = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).reshape(GROWS, GCOLS)
    assert torch.equal(got, matrix(2)), "ckptctl export: the consolidated matrix differs"
    print("ok: ckptctl export writes the consolidated global tensors")


def check_bad_shapes(store, tmp):
    """Absurd shard shapes are libckpt errors naming the tensor and dimension, on
    save (InvalidArgumentError) and on load (CorruptError, before anything is allocated), where
    they were Python's ValueError or torch's RuntimeError (or wrapped silently by ctypes); and a
    shard table that does not tile its tensor fails the load instead of giving zeros."""
    import shutil
    import torch
    import libckpt
    from libckpt import _dread, _dsave, _tree
    import libckpt.dist as D
    for g, o, what in (((2 ** 64, 8), (0, 0), "dimension 0: global extent 18446744073709551616"),
                       ((-1, 8), (0, 0), "dimension 0: global extent -1"),
                       ((4, 8), (0, -1), "dimension 1: the box [-1, 7)"),
                       ((2 ** 40, 2 ** 40), (0, 0), "more than a tensor can hold")):
        try:
            libckpt.Shard(torch.zeros(2, 8), global_shape=g, offset=o)
            sys.exit(f"FAIL: Shard(global_shape={g}, offset={o}) was accepted")
        except libckpt.InvalidArgumentError as e:
            assert e.code == 3 and what in str(e), (g, o, str(e))
    sh = libckpt.Shard(torch.zeros(2, 8), global_shape=(4, 8), offset=(2, 0))
    sh.global_shape = (2 ** 64 + 4, 8)  # changed after the check: the save checks it by name
    _, leaves = _tree.flatten({"w": sh}, leaf_hook=D._leaf_hook)
    try:
        _dsave._entries(leaves)
        sys.exit("FAIL: a shard of global extent 2^64 + 4 was accepted at save")
    except libckpt.InvalidArgumentError as e:
        assert "tensor 'w': dimension 0" in str(e), str(e)
    ti = {"name": "z", "shape": (0, 2 ** 63 + 5), "nbytes": 0, "ckpt_dtype": 12, "dtype": "F32"}
    try:
        _dread.alloc_checked("torch", ti, None, 7)
        sys.exit("FAIL: a global tensor of extent 2^63 + 5 was allocated")
    except libckpt.CorruptError as e:
        assert "'z': dimension 1 is 9223372036854775813" in str(e), str(e)
    ck = os.path.join(ROOT, os.environ.get("B", "build"))
    p = subprocess.run([os.path.join(ck, "bin", "ckptctl"), "show", store, "2", "--all", "--json"],
                       capture_output=True, text=True, check=True)
    tab = json.loads(p.stdout)["metadata"]["ckpt.dist.shards.w"].split()
    assert tab[2:4] == [str(GROWS), str(GCOLS)], tab
    for rows, what in ((2 ** 40, f"{GROWS * GCOLS} of its {2 ** 40 * GCOLS} elements"),
                       (GROWS + 1, f"{GROWS * GCOLS} of its {(GROWS + 1) * GCOLS} elements")):
        bad = os.path.join(tmp, "bad-shapes")
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(store, bad, symlinks=True)
        forged = " ".join(tab[:2] + [str(rows)] + tab[3:])
        subprocess.run([os.path.join(ck, "tests", "bin", "mfset"),
                        os.path.join(bad, "manifests", "%020d.ckpt" % 2), "ckpt.dist.shards.w",
                        forged], check=True)
        with libckpt.Store(bad, read_only=True) as st:
            try:
                st.load(2)
                sys.exit(f"FAIL: load of a shard table of {rows} rows for {GROWS} worked")
            except libckpt.CorruptError as e:
                assert "tensor w (ckpt.dist.shards.w)" in str(e) and what in str(e), str(e)
    print("ok: absurd shard shapes and shard tables that do not tile are libckpt errors "
          "naming the tensor (InvalidArgumentError at save, CorruptError at load)")


def check_kill(store, where):
    import libckpt
    outs = run_world(4, "kill", store, where)
    for r, (rc, res, text) in enumerate(outs):
        if r == 2:
            if rc != -signal.SIGKILL:
                sys.exit(f"FAIL: kill in {where}: rank 2 exited {rc}, not by SIGKILL:\n{text}")
            continue
        if rc != 0 or res is None or not res["raised"]:
            sys.exit(f"FAIL: kill in {where}: rank {r} did not raise (exit {rc}):\n{text}")
        if "rank 2 " not in res["raised"]:
            sys.exit(f"FAIL: kill in {where}: rank {r}'s error does not name rank 2: {res['raised']}")
    print(f"ok: rank 2 killed in {where}: ranks 0, 1, 3 raised in " +
          ", ".join(f"{o[1]['seconds']} s" for o in outs if o[1]) + f" ({outs[0][1]['raised']})")
    with libckpt.Store(store) as st:
        steps = st.steps()
        assert steps == [1, 2, 3], f"after the kill: checkpoints {steps}"
        for s in steps:
            dmg = st.verify(s)
            assert dmg == [], f"verify {s}: {dmg}"
    print(f"ok: after the kill in {where}: checkpoints 1 to 3 listed and intact, no step 4")


def check_hang(store):
    import libckpt
    outs = run_world(4, "hang", store, hang=2)
    for r in (0, 1, 3):
        rc, res, text = outs[r]
        if rc != 0 or res is None or not res["raised"]:
            sys.exit(f"FAIL: hung rank 2: rank {r} did not raise (exit {rc}):\n{text}")
        if f"group timeout {TIMEOUT} s" not in res["raised"]:
            sys.exit(f"FAIL: hung rank 2: rank {r}'s error does not come from the group's "
                     f"timeout: {res['raised']}")
    with libckpt.Store(store) as st:
        assert 4 not in st.steps(), st.steps()
    print(f"ok: rank 2 hung: the others raised after the group's timeout ({outs[0][1]['raised']})")


def check_share(store, tmp):
    """Replicated entries restored by 4 ranks of one node are read from the store about once, not
    4 times (each rank's bytes_read), spread over the ranks, bit-identical; a damaged chunk raises
    ChecksumError on every rank, the reading rank's failure broadcast (no hang)."""
    outs = run_world(4, "share", store, "on")
    check_world(outs, "4 ranks restore replicated entries, each read once per node")
    off = run_world(4, "share", store, "off")
    check_world(off, "4 ranks restore replicated entries, each rank reading all (off)")
    for what, o in (("on", outs), ("off", off)):
        bad = [r for r, (_, res, _) in enumerate(o) if not res["ok"]]
        assert not bad, f"{what}: ranks {bad} restored other values"
    per_on, per_off = outs[0][1]["stats"]["bytes_read_per_rank"], off[0][1]["stats"][
        "bytes_read_per_rank"]
    assert per_on == [o[1]["stats"]["bytes_read"] for o in outs], per_on
    on_sum, off_sum = sum(per_on), sum(per_off)
    # every rank read everything with sharing off; about a quarter of that with it on
    assert min(per_off) > 0 and max(per_off) - min(per_off) < 0.05 * max(per_off), per_off
    assert abs(on_sum - per_off[0]) <= 0.02 * per_off[0], (per_on, per_off)
    assert sum(1 for b in per_on if b > 0) == 3, per_on  # 3 entries over 4 ranks: spread
    got = [o[1]["stats"]["bytes_received"] for o in outs]
    assert all(g > 0 for g in got), got
    print(f"ok: bytes read from the store by 4 ranks: {on_sum} shared (per rank {per_on}), "
          f"{off_sum} without sharing ({off_sum / on_sum:.2f}x)")
    # damage the replicated tensor's first chunk (raw bytes: the store is uncompressed)
    import shutil
    dmg = os.path.join(tmp, "damaged")
    shutil.copytree(store, dmg)
    want = bias().numpy().tobytes()[4096:8192]
    hits = 0
    for name in sorted(os.listdir(os.path.join(dmg, "packs"))):
        path = os.path.join(dmg, "packs", name)
        with open(path, "r+b") as f:
            data = f.read()
            at = data.find(want)
            while at >= 0:
                f.seek(at + 100)
                f.write(bytes([data[at + 100] ^ 0xFF]))
                hits += 1
                at = data.find(want, at + 1)
    assert hits >= 1, "the replicated tensor's bytes were not found in the packs"
    outs = run_world(4, "share", dmg, "damage")
    check_world(outs, "a damaged replicated chunk, read once for the node")
    errs = [o[1]["error"] for o in outs]
    assert errs == ["ChecksumError"] * 4, [(o[1]["error"], o[1].get("msg")) for o in outs]
    print(f"ok: the damaged chunk raises ChecksumError on every rank ({outs[1][1]['msg'][:120]})")


def main():
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        print("skip: this torch has no torch.distributed gloo backend")
        return 77
    import libckpt
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        libckpt.Store(store, create=True, chunk_size="64K").close()
        outs = run_world(4, "save", store)
        check_world(outs, "4 ranks save steps 1, 2 and 3 (async), restore them by the same split")
        new = [o[1]["new_chunks"] for o in outs]
        assert all(n["1"] > 0 for n in new), new
        step2 = [n["2"] for n in new]
        # rank 1 changed one row: its first chunk; the replicated and single-rank tensors and
        # the other shards are unchanged, whichever rank wrote them at step 1
        assert step2 == [0, 1, 0, 0], f"step 2 wrote chunks {step2} (rank order), not [0, 1, 0, 0]"
        assert [n["3"] for n in new] == [0, 0, 4, 0], new
        print(f"ok: incremental: new chunks per rank, step 1 {[n['1'] for n in new]}, step 2 "
              f"{step2}, step 3 {[n['3'] for n in new]}")
        check_load(store)
        check_flat(tmp)
        check_mesh(store)
        check_export(store, tmp)
        check_bad_shapes(store, tmp)
        check_world(run_world(2, "restore2", store), "2 ranks restore the 4-rank checkpoints by "
                    "column shards (non-contiguous targets) and replicated tensors")
        check_share(store, tmp)
        check_repeat(tmp)
        for where in ("commit", "plan"):
            check_kill(store, where)
        check_hang(store)
        # Each re-save of step 4 cleared what the killed one before it left (its claim); the
        # last, killed before any part was written, left parts/4 with its claim only.
        top = os.path.join(store, "parts", "%020d" % 4)
        assert os.path.isdir(top), os.listdir(os.path.join(store, "parts"))
        with libckpt.Store(store) as st:
            st.gc()
            after = st.du()["leftover_bytes"]
            assert after == 0 and not os.path.exists(top), (after, os.listdir(top))
            assert [d for s in st.steps() for d in st.verify(s)] == []
        print("ok: gc removed what the dead saves of step 4 left; the store verifies")
        outs = run_world(4, "errors", store)
        check_world(outs, "failures on one live rank, then a save of step 5")
        for r, (_, res, _) in enumerate(outs):
            e1, e2, e3, e4, e5 = res["errors"]
            for e in (e4, e5):
                assert e and "injected: adding the tensors failed" in e and (
                    r == 2 and e.startswith("RuntimeError") or
                    "rank 2 failed" in e and e.startswith("CkptIOError")), (r, e)
            assert e3 and "gap" in e3 and (r == 0 or "rank 0 could not commit" in e3), (r, e3)
            assert e1 and ("rank 1 could not prepare" in e1 or r == 1 and "oops" in e1), (r, e1)
            assert e2 and "'bias'" in e2 and "rank 3: F64" in e2, (r, e2)
        with libckpt.Store(store) as st:
            assert st.steps() == [1, 2, 3, 5], st.steps()
        print("ok: a failure on one rank raises on every rank (" +
              "; ".join(outs[1][1]["errors"][i] for i in range(5)) + "); the next save works")
    print("python dist ok")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        worker(sys.argv)
        sys.exit(0)
    sys.exit(main())
