#!/usr/bin/env python3
"""libckpt as DCP's storage (python/libckpt/dcp.py), on torch 2.x with FSDP2 (fully_shard) on a
CPU mesh over gloo, state dicts from get_state_dict / set_state_dict.

test_dcp.py main (tests/python/t-python-dcp.sh):
- One process without torch.distributed: dcp.save of a plain state dict, dcp.load of the newest.
- Pool staging: dcp.async_save of a 96 MiB state through a 16 MiB pool keeps the values of the
  call, and adds under 40 MiB of peak memory (stage_in_pool=False, DCP's host copy: >= 64 MiB).
- 2 ranks dcp.save step 1 (checkpoint_id STORE/step-1), the same state again (checkpoint_id STORE:
  the next step, 2), one changed bias (checkpoint_id (STORE, 3)), and dcp.async_save of step 4 whose
  parameters change right after async_save returns.
- Incremental: step 2 wrote no pack bytes, step 3 under a tenth of step 1 (the store's list).
- Every step verifies; loads on 1, 4 and 2 ranks (DCP's resharding through the reader; STORE
  alone is the newest step) give, after set_state_dict, the saved full state bit for bit, the
  non-tensor entries too; the async step has the values of the time of the call.
- ckptctl lists the 4 steps as 2-rank checkpoints, verifies them, and exports step 3 with the
  model's tensors consolidated (read back from the safetensors file).

test_dcp.py faults (tests/python/t-python-dcp-faults.sh):
- Rank 0 killed in finish(), after every part is durable: no checkpoint is listed, the earlier
  one still loads, gc removes the parts, and the same step saves and loads afterwards.
- Saving a step that exists: every rank raises ExistsError's message; nothing changes.
- A rank whose write_data fails (a dtype libckpt lacks): every rank raises; the same writers then
  save that step.
- A damaged chunk: dcp.load raises a checksum error naming it instead of loading.
- ckptctl prune keeps the newest; the kept DCP checkpoint still loads.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fsdp2_common import (ROOT, apply_state, build, entry, full_state, init_rank,  # noqa: E402
                          print_ok, result_line, run_world, same_state, sharded_state, train)
sys.path.insert(0, os.path.join(ROOT, "python"))

CKPTCTL = os.path.join(ROOT, os.environ.get("B", "build"), "bin", "ckptctl")
EXTRA = {"epoch": 3, "name": "run-a", "sizes": [1, 2, 3]}


def ref_path(store, step):
    return os.path.join(os.path.dirname(store), f"ref-{step}.pt")


def keep_ref(rank, m, opt, store, step, extra):
    """Every rank consolidates (collective); rank 0 keeps the full state of `step` to compare."""
    import torch
    full = full_state(m, opt)
    full.update({f"extra.{k}": v for k, v in extra.items()})
    if rank == 0:
        torch.save(full, ref_path(store, step))


# ---------------------------------------------------------------------------------- rank roles
def role_save(rank, world, store):
    import torch
    import torch.distributed.checkpoint as dcp
    from libckpt.dcp import LibckptStorageWriter
    m, opt = build(world)
    train(m, opt, 2, seed=1)
    w = LibckptStorageWriter(store)
    state = dict(sharded_state(m, opt), extra=dict(EXTRA))
    dcp.save(state, storage_writer=w, checkpoint_id=f"{store}/step-1")
    keep_ref(rank, m, opt, store, 1, EXTRA)
    dcp.save(state, storage_writer=w, checkpoint_id=store)  # the next step: 2
    with torch.no_grad():
        m[4].bias.add_(1.0)  # one small tensor changes
    state = dict(sharded_state(m, opt), extra=dict(EXTRA))
    dcp.save(state, storage_writer=w, checkpoint_id=(store, 3))
    keep_ref(rank, m, opt, store, 3, EXTRA)
    with torch.no_grad():
        m[0].weight.mul_(2.0)
    extra4 = dict(EXTRA, epoch=4)
    state = dict(sharded_state(m, opt), extra=dict(extra4))
    keep_ref(rank, m, opt, store, 4, extra4)
    t0 = time.perf_counter()
    fut = dcp.async_save(state, storage_writer=w, checkpoint_id=f"{store}/step-4")
    blocked = time.perf_counter() - t0
    with torch.no_grad():  # training goes on: the checkpoint keeps the values at the call
        m[0].weight.add_(100.0)
        m[2].weight.zero_()
    fut.result()
    print(f"TIMES blocked {blocked:.4f} total {time.perf_counter() - t0:.4f}", flush=True)
    w.close()


def role_load(rank, world, store, cid, step, expect_error=None):
    import torch
    import torch.distributed.checkpoint as dcp
    from libckpt.dcp import LibckptStorageReader
    m, opt = build(world, seed=5)
    train(m, opt, 1, seed=9)  # other values, and optimizer state to load into
    state = dict(sharded_state(m, opt), extra={"epoch": 0, "name": "", "sizes": []})
    if cid.startswith("tuple:"):
        cid = (store, int(cid[6:]))
    try:
        dcp.load(state, storage_reader=LibckptStorageReader(store), checkpoint_id=cid)
    except BaseException as e:  # noqa: BLE001  DCP raises CheckpointException, a BaseException
        if expect_error is None:
            raise
        text = str(e)
        assert expect_error in text.lower(), f"load failed without {expect_error!r}: {text}"
        print(f"ok: rank {rank}: the load raised: {text.splitlines()[-1][:300]}", flush=True)
        return
    assert expect_error is None, "the load of damaged data succeeded"
    apply_state(m, opt, state)
    got = full_state(m, opt)
    got.update({f"extra.{k}": v for k, v in state["extra"].items()})
    if rank == 0:
        same_state(got, torch.load(ref_path(store, step)), f"step {step} loaded on {world} ranks")
        print(f"ok: step {step} ({cid}) loads bit for bit on {world} ranks", flush=True)



def role_crash(rank, world, store, step):
    import torch.distributed.checkpoint as dcp
    from libckpt.dcp import LibckptStorageWriter

    class DiesInFinish(LibckptStorageWriter):
        def finish(self, metadata, results):
            print("dying in finish", flush=True)
            os._exit(17)  # every part is durable; the global commit has not run

    m, opt = build(world)
    train(m, opt, 3, seed=2)
    dcp.save(dict(sharded_state(m, opt), extra=dict(EXTRA)), storage_writer=DiesInFinish(store),
             checkpoint_id=f"{store}/step-{step}")


def role_save_one(rank, world, store, step, expect_error=None):
    import torch.distributed.checkpoint as dcp
    from libckpt.dcp import LibckptStorageWriter
    m, opt = build(world)
    train(m, opt, int(step), seed=3)
    state = dict(sharded_state(m, opt), extra=dict(EXTRA))
    try:
        dcp.save(state, storage_writer=LibckptStorageWriter(store),
                 checkpoint_id=f"{store}/step-{step}")
    except BaseException as e:  # noqa: BLE001  DCP raises CheckpointException, a BaseException
        if expect_error is None:
            raise
        assert expect_error in str(e).lower(), f"save failed without {expect_error!r}: {e}"
        print(f"ok: rank {rank}: the save raised: {str(e).splitlines()[-1][:300]}", flush=True)
        return
    assert expect_error is None, f"the save of step {step} succeeded"
    keep_ref(rank, m, opt, store, step, EXTRA)


def role_after_crash(rank, world, store):
    """Step 2 again (after the crash left its parts, which gc removed); step 2 once more raises
    ExistsError on every rank; then role_fail_then_save of step 3."""
    role_save_one(rank, world, store, "2")
    role_save_one(rank, world, store, "2", "exist")
    role_fail_then_save(rank, world, store, "3")


def role_fail_then_save(rank, world, store, step):
    """Rank 1 holds a tensor libckpt cannot save (complex64): every rank raises, naming it; the
    same writers then save the step (rank 0's abandoned part is given up by reset())."""
    import torch
    import torch.distributed.checkpoint as dcp
    from libckpt.dcp import LibckptStorageWriter
    m, opt = build(world)
    train(m, opt, 2, seed=4)
    w = LibckptStorageWriter(store)
    state = dict(sharded_state(m, opt), extra=dict(EXTRA))
    bad = dict(state, odd={"z": torch.zeros(3, dtype=torch.complex64)} if rank == 1 else {})
    try:
        dcp.save(bad, storage_writer=w, checkpoint_id=f"{store}/step-{step}")
    except BaseException as e:  # noqa: BLE001  CheckpointException
        assert "complex" in str(e), f"the failure does not name the dtype: {e}"
        print(f"ok: rank {rank}: a rank's failed write raised here too", flush=True)
    else:
        raise AssertionError("a save with a complex tensor succeeded")
    dcp.save(state, storage_writer=w, checkpoint_id=f"{store}/step-{step}")
    keep_ref(rank, m, opt, store, int(step), EXTRA)
    w.close()


def rank_main(argv):
    import torch.distributed as dist
    rank, world, args = init_rank(argv)
    what, store, rest = args[0], args[1], args[2:]
    {"save": lambda: role_save(rank, world, store),
     "load": lambda: [role_load(rank, world, store, rest[i], int(rest[i + 1]))
                      for i in range(0, len(rest), 2)],
     "load-bad": lambda: role_load(rank, world, store, rest[0], int(rest[1]), rest[2]),
     "crash": lambda: role_crash(rank, world, store, rest[0]),
     "after-crash": lambda: role_after_crash(rank, world, store),
     "save-one": lambda: role_save_one(rank, world, store, rest[0],
                                       rest[1] if len(rest) > 1 else None)}[what]()
    dist.barrier()
    dist.destroy_process_group()
    print("RESULT ok", flush=True)


# ---------------------------------------------------------------------------------- checks
def ckptctl(*args, ok=True):
    p = subprocess.run([CKPTCTL, *args], capture_output=True, text=True, timeout=120)
    if ok:
        assert p.returncode == 0, f"ckptctl {' '.join(args)}: exit {p.returncode}: {p.stderr}"
    return p


def read_safetensors(path):
    import torch
    dt = {"F32": torch.float32, "I64": torch.int64, "F64": torch.float64, "U8": torch.uint8,
          "BF16": torch.bfloat16, "F16": torch.float16, "I32": torch.int32}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(data[a:b]), dtype=dt[v["dtype"]]).view(v["shape"])
    return out


def load(n, store, *pairs, expect_error=None):
    """Loads on n ranks each (checkpoint_id, step) of pairs, in one world."""
    args = [str(x) for pair in pairs for x in pair]
    outs = run_world(__file__, n, (["load-bad", store] + args + [expect_error]) if expect_error
                     else (["load", store] + args))
    print_ok(outs)


def one_process(tmp):
    """dcp.save / dcp.load without torch.distributed (DCP's no_dist): plain tensors, world 1."""
    import torch
    import torch.distributed.checkpoint as dcp
    from libckpt.dcp import LibckptStorageReader, LibckptStorageWriter
    store = os.path.join(tmp, "single")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 40), torch.nn.Linear(40, 3))
    sd = {"model": m.state_dict(), "epoch": 2}
    dcp.save(sd, storage_writer=LibckptStorageWriter(store), checkpoint_id=f"{store}/step-5")
    torch.manual_seed(1)
    m2 = torch.nn.Sequential(torch.nn.Linear(32, 40), torch.nn.Linear(40, 3))
    got = {"model": m2.state_dict(), "epoch": 0}
    dcp.load(got, storage_reader=LibckptStorageReader(store), checkpoint_id=store)
    for k, v in m.state_dict().items():
        assert torch.equal(got["model"][k], v), f"one process: {k} differs"
    assert got["epoch"] == 2, got["epoch"]
    rows = json.loads(ckptctl("list", "--json", store).stdout)
    rows = rows.get("checkpoints", rows) if isinstance(rows, dict) else rows
    assert [r["step"] for r in rows] == [5], rows
    print("ok: one process (no torch.distributed): dcp.save of step 5, dcp.load of the newest")


def _rss(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) << 10
    raise AssertionError(f"no {field} in /proc/self/status")


def pool_staging(tmp):
    """dcp.async_save without torch.distributed, a 96 MiB state through a 16 MiB pool: it keeps
    the values of the call (the snapshot streams through the pool), and the peak memory it adds
    is the pool's, not a copy of the state, unlike stage_in_pool=False (DCP's host copy)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from libckpt.dcp import LibckptStorageReader, LibckptStorageWriter
    mib = 1 << 20
    state = {"w": {f"t{i}": torch.full((mib,), float(i)) for i in range(24)}, "epoch": 7}
    grown = {}
    for pool in (True, False):
        store = os.path.join(tmp, f"pool-{pool}")
        w = LibckptStorageWriter(store, stage_in_pool=pool, pool_size="16M", chunk_size="1M")
        dcp.save(state, storage_writer=w, checkpoint_id=(store, 1))  # the store and its pool
        for t in state["w"].values():
            t.add_(1.0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        base = _rss("VmRSS")
        fut = dcp.async_save(state, storage_writer=w, checkpoint_id=(store, 2))
        grown[pool] = _rss("VmHWM") - base
        for t in state["w"].values():  # training goes on
            t.add_(100.0)
        fut.result()
        w.close()
        got = {"w": {k: torch.empty(mib) for k in state["w"]}, "epoch": 0}
        dcp.load(got, storage_reader=LibckptStorageReader(store), checkpoint_id=(store, 2))
        for i in range(24):
            assert torch.equal(got["w"][f"t{i}"], torch.full((mib,), float(i) + 1.0)), \
                f"stage_in_pool={pool}: t{i} does not hold the values of the call"
        assert got["epoch"] == 7
        for t in state["w"].values():
            t.sub_(101.0)
    mb = {k: v / mib for k, v in grown.items()}
    assert mb[True] < 40, f"async_save through the pool added {mb[True]:.0f} MiB of peak memory"
    assert mb[False] >= 64, f"the host-copy staging added only {mb[False]:.0f} MiB (the test " \
                            f"measures nothing?)"
    print(f"ok: async_save of a 96 MiB state through a 16 MiB pool keeps the values of the call; "
          f"peak memory +{mb[True]:.0f} MiB (host-copy staging +{mb[False]:.0f} MiB)")


def pool_grows(tmp):
    """Without pool_size, dcp.async_save grows the pool to the state (288 MiB, over the 256 MiB
    default) at its first call, as DCP's own stager holds a copy of it: the call blocks for the
    copy only; the state changed right after it returned is saved as it was at the call."""
    import torch
    import torch.distributed.checkpoint as dcp
    from libckpt.dcp import LibckptStorageReader, LibckptStorageWriter
    mib = 1 << 20
    state = {f"t{i}": torch.full((4 * mib,), float(i)) for i in range(18)}  # 16 MiB each
    store = os.path.join(tmp, "pool-grows")
    w = LibckptStorageWriter(store)
    dcp.async_save(state, storage_writer=w, checkpoint_id=(store, 1)).result()
    pool = w.last_stats["pool_bytes"]
    assert pool >= 288 * mib, f"the pool of a 288 MiB async_save is {pool / mib:.0f} MiB"
    assert w.last_stats["wait_seconds"] == 0, w.last_stats  # no job waited for a slab
    fut = dcp.async_save(state, storage_writer=w, checkpoint_id=(store, 2))
    for t in state.values():
        t.add_(1.0)
    fut.result()
    assert w.last_stats["pool_bytes"] == pool, "the grown pool was not kept"
    w.close()
    got = {k: torch.empty(4 * mib) for k in state}
    dcp.load(got, storage_reader=LibckptStorageReader(store), checkpoint_id=(store, 2))
    for i in range(18):
        assert torch.equal(got[f"t{i}"], torch.full((4 * mib,), float(i))), f"t{i} changed"
    print(f"ok: without pool_size, async_save of a 288 MiB state grew the pool to "
          f"{pool / mib:.0f} MiB and kept it; the values of the call were saved")


def main_part(tmp):
    import torch
    import libckpt
    one_process(tmp)
    pool_staging(tmp)
    pool_grows(tmp)
    store = os.path.join(tmp, "store")
    libckpt.Store(store, create=True, chunk_size="64K").close()
    outs = run_world(__file__, 2, ["save", store])
    print("ok: 2 ranks saved steps 1-4 (dcp.save x3, dcp.async_save)")
    times = result_line(outs[0][1], "TIMES").split()
    print(f"async_save: blocked {float(times[1]) * 1e3:.1f} ms of {float(times[3]) * 1e3:.1f} ms")

    with libckpt.Store(store, read_only=True) as st:
        info = {i["step"]: i for i in st.list()}
        assert sorted(info) == [1, 2, 3, 4], f"steps {sorted(info)}"
        new = {s: info[s]["new_bytes"] for s in info}
        assert new[1] > 0 and new[2] == 0, f"an unchanged save wrote {new[2]} bytes (step 1: {new[1]})"
        assert 0 < new[3] <= new[1] // 10, f"one changed bias wrote {new[3]} bytes of {new[1]}"
        print(f"ok: incremental: step 1 wrote {new[1]} bytes, the same state {new[2]}, one "
              f"changed bias {new[3]}")
        for s in info:
            assert st.verify(s) == [], f"step {s} damaged"
        assert "dcp.metadata" in st.metadata(3), "no DCP metadata in the checkpoint"
    print("ok: every step verifies")

    load(1, store, (f"{store}/step-3", 3))
    load(4, store, ("tuple:3", 3), (f"{store}/step_1", 1))
    load(2, store, (store, 4))               # the newest: the async save, as it was at the call

    p = ckptctl("list", "--json", store)
    rows = json.loads(p.stdout)
    rows = rows.get("checkpoints", rows) if isinstance(rows, dict) else rows
    assert [r["step"] for r in rows] == [1, 2, 3, 4], p.stdout
    ckptctl("verify", store)
    out = os.path.join(tmp, "step3.safetensors")
    ckptctl("export", "--output", out, store, "3")
    got = read_safetensors(out)
    ref = torch.load(ref_path(store, 3))
    names = [k for k in ref if k.startswith("model.")]
    for k in names:
        assert k in got, f"export lacks {k} (has {sorted(got)[:8]}...)"
        assert torch.equal(got[k], ref[k]), f"export: {k} differs"
    print(f"ok: ckptctl lists and verifies, and exports the {len(names)} model tensors consolidated")
    print("python dcp ok")


def damage_packs(store):
    """Overwrites the first record's payload in every pack (its data, not its header)."""
    n = 0
    for root, _, files in os.walk(store):
        for f in files:
            if f.endswith(".pack"):
                with open(os.path.join(root, f), "r+b") as fh:
                    fh.seek(4096 + 64)
                    fh.write(b"\xa5" * 512)
                n += 1
    assert n, f"no pack in {store}"


def faults_part(tmp):
    import libckpt
    store = os.path.join(tmp, "store")
    libckpt.Store(store, create=True, chunk_size="64K").close()
    run_world(__file__, 2, ["save-one", store, "1"])

    outs = run_world(__file__, 2, ["crash", store, "2"], expect_ok=False)
    assert outs[0][0] == 17 and "dying in finish" in outs[0][1], f"rank 0: {outs[0]}"
    with libckpt.Store(store, read_only=True) as st:
        assert st.steps() == [1], f"a save killed before finish() left steps {st.steps()}"
    parts = os.path.join(store, "parts", "%020d" % 2)
    assert [f for f in os.listdir(parts) if f.endswith(".part")], "the dead save left no parts"
    print("ok: rank 0 killed in finish(): no checkpoint 2, its parts are on disk")
    ckptctl("gc", store)
    assert not os.path.exists(parts) or not [f for f in os.listdir(parts) if f.endswith(".part")], \
        f"gc left the dead save's parts: {os.listdir(parts)}"
    print("ok: gc removed the dead save's parts")

    run_world(__file__, 2, ["after-crash", store])
    with libckpt.Store(store, read_only=True) as st:
        assert st.steps() == [1, 2, 3], st.steps()
    load(1, store, (store + "/step-1", 1), (store + "/step-2", 2), (store, 3))
    print("ok: step 2 saved again after the crash; an existing step and a rank's failed write "
          "raise on every rank; the same writers save step 3; all three load")

    bad = os.path.join(tmp, "damaged")
    shutil.copytree(store, bad)
    damage_packs(bad)
    load(1, bad, (f"{bad}/step-2", 2), expect_error="checksum")
    print("ok: a damaged chunk raises a checksum error on load")

    ckptctl("prune", "--keep-last", "1", store)
    with libckpt.Store(store, read_only=True) as st:
        assert st.steps() == [3], st.steps()
    ckptctl("verify", store)
    load(1, store, (store, 3))
    print("ok: ckptctl prune keeps the newest DCP checkpoint, which verifies and loads")
    print("python dcp faults ok")


def main():
    import torch
    try:
        import libckpt.dcp  # noqa: F401
    except ImportError as e:
        # an older torch (Debian 12's 1.13): the import must say what it needs and what works
        msg = str(e)
        assert "torch 2.6 or later" in msg and torch.__version__ in msg, f"unclear: {msg}"
        print(f"skip: {msg}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        {"main": main_part, "faults": faults_part}[sys.argv[1]](tmp)
    return 0


if __name__ == "__main__":
    entry(rank_main, main)
