#!/usr/bin/env python3
"""A DCP user's first run with libckpt (torch 2.x: the torch2 virtual environment; FSDP2 on a CPU
mesh over gloo; tests/python/t-python-dcp-run.sh):

- first-async, 2 ranks: the first dcp.async_save goes into a store that does not exist, its
  parent directories missing too (every rank creates it; none waits on another); training goes on
  (FSDP2's collectives on the default group) while the save runs on writer.async_group; an
  async_save given no process_group warns, naming writer.async_group; both checkpoints load.
- fail-one, 2 ranks: rank 1's writer cannot open the store (a bad store option): every rank
  raises, rank 0 naming rank 1 and its error, not a rank that died.
- appstate, 2 ranks: DCP's tutorial AppState (a Stateful whose state_dict() is get_state_dict's
  DTensors, load_state_dict set_state_dict) of an FSDP2 model and AdamW, saved with Store.save,
  restored with Store.restore on 2 ranks and on 1: load_state_dict gets DTensors laid out as the
  restoring ranks' state_dict() returned them, and the state is the saved one bit for bit.
"""

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fsdp2_common import (ROOT, build, entry, full_state, init_rank, print_ok,  # noqa: E402
                          run_world, same_state, train)
sys.path.insert(0, os.path.join(ROOT, "python"))


def app_state(model, optimizer):
    """DCP's tutorial AppState (pytorch.org, "Getting Started with Distributed Checkpoint")."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.checkpoint.stateful import Stateful

    class AppState(Stateful):
        def __init__(self, model, optimizer=None):
            self.model = model
            self.optimizer = optimizer
            self.loaded = None  # test only: what load_state_dict got

        def state_dict(self):
            model_state_dict, optimizer_state_dict = get_state_dict(self.model, self.optimizer)
            return {"model": model_state_dict, "optim": optimizer_state_dict}

        def load_state_dict(self, state_dict):
            self.loaded = state_dict
            set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"],
                           optim_state_dict=state_dict["optim"])
    return AppState(model, optimizer)


def ref_path(tmp, what):
    return os.path.join(tmp, f"ref-{what}.pt")


def frozen(full):
    """full_state's values copied (its optimizer step counts are the optimizer's own tensors)."""
    return {k: v.clone() if hasattr(v, "clone") else v for k, v in full.items()}


# ---------------------------------------------------------------------------------- rank roles
def role_first_async(rank, world, store):
    import warnings
    import torch
    import torch.distributed.checkpoint as dcp
    from libckpt.dcp import LibckptStorageReader, LibckptStorageWriter
    assert not os.path.exists(os.path.dirname(store)), "the store's parent must be missing"
    m, opt = build(world)
    train(m, opt, 1, seed=1)
    writer = LibckptStorageWriter(store)
    state = {"app": app_state(m, opt)}
    fut = dcp.async_save(state, storage_writer=writer, process_group=writer.async_group,
                         checkpoint_id=f"{store}/step-1")
    full1 = frozen(full_state(m, opt))  # before training changes it
    train(m, opt, 2, seed=2)    # FSDP2's collectives on the default group while the save runs
    fut.result()
    full2 = frozen(full_state(m, opt))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fut = dcp.async_save(state, storage_writer=writer, checkpoint_id=f"{store}/step-2")
    fut.result()  # nothing else runs on the default group meanwhile: this one is fine
    msgs = [str(w.message) for w in seen if "process_group" in str(w.message)]
    assert msgs and "writer.async_group" in msgs[0], [str(w.message) for w in seen]
    writer.close()
    for step, full in ((1, full1), (2, full2)):
        m2, opt2 = build(world, seed=7)
        train(m2, opt2, 1, seed=9)
        st2 = {"app": app_state(m2, opt2)}
        dcp.load(st2, storage_reader=LibckptStorageReader(store), checkpoint_id=(store, step))
        same_state(full_state(m2, opt2), full, f"async step {step}")
    if rank == 0:
        print("ok: the first dcp.async_save created the store and its parents on 2 ranks; "
              "training ran during the save on writer.async_group; both steps load", flush=True)
        print("ok: async_save without a process_group warns: " + msgs[0][:90], flush=True)


def role_fail_one(rank, world, store):
    import torch.distributed.checkpoint as dcp
    import libckpt
    from libckpt.dcp import LibckptStorageWriter
    m, opt = build(world)
    opts = {"io_engine": "no-such-engine"} if rank == 1 else {}
    writer = LibckptStorageWriter(store, **opts)
    try:
        fut = dcp.async_save({"app": app_state(m, opt)}, storage_writer=writer,
                             process_group=writer.async_group, checkpoint_id=f"{store}/step-1")
        fut.result()
    except Exception as e:  # noqa: BLE001
        err = e
    else:
        raise AssertionError(f"rank {rank}: the save succeeded")
    msg = str(err)
    if rank == 0:
        assert "rank 1 failed" in msg and "io_engine" in msg and "died" not in msg, msg
        assert isinstance(err, libckpt.CkptError), type(err)
        print(f"ok: rank 1's error reaches rank 0 as its error: {msg[:160]}", flush=True)
    else:
        assert "io_engine" in msg, msg


def role_appstate_save(rank, world, tmp):
    import torch
    import libckpt
    m, opt = build(world)
    train(m, opt, 2, seed=1)
    with libckpt.Store(os.path.join(tmp, "store"), create=True, chunk_size="64K") as st:
        st.save({"app": app_state(m, opt), "step": 2}, 2)  # collective: the default group
    full = full_state(m, opt)
    if rank == 0:
        torch.save(full, ref_path(tmp, "appstate"))


def role_appstate_restore(rank, world, tmp):
    import torch
    import libckpt
    from libckpt import dtensor_module
    m, opt = build(world, seed=5)
    train(m, opt, 1, seed=9)  # other values, and optimizer state
    app = app_state(m, opt)
    state = {"app": app, "step": 0}
    with libckpt.Store(os.path.join(tmp, "store"), read_only=True) as st:
        assert st.restore(state) == 2
    assert state["step"] == 2, state["step"]
    # what load_state_dict got is what state_dict() gives on these ranks: DTensors, sharded here
    DT = dtensor_module().DTensor
    mine = app.state_dict()
    for k, v in mine["model"].items():
        got = app.loaded["model"][k]
        assert isinstance(got, DT), f"model.{k}: load_state_dict got a {type(got).__name__}"
        assert got.placements == v.placements and got.to_local().shape == v.to_local().shape, k
    full = full_state(m, opt)
    if rank == 0:
        same_state(full, torch.load(ref_path(tmp, "appstate")), f"AppState on {world} ranks")
        print(f"ok: DCP's tutorial AppState restored on {world} ranks (DTensors to "
              f"load_state_dict), bit for bit", flush=True)


def rank_main(argv):
    import torch.distributed as dist
    rank, world, args = init_rank(argv)
    what, where = args[0], args[1]
    {"first-async": role_first_async, "fail-one": role_fail_one,
     "appstate-save": role_appstate_save,
     "appstate-restore": role_appstate_restore}[what](rank, world, where)
    dist.barrier()
    dist.destroy_process_group()
    print("RESULT ok", flush=True)


def main():
    import torch
    try:
        import libckpt.dcp  # noqa: F401
    except ImportError as e:
        print(f"skip: {e}")
        return 77
    del torch
    part = sys.argv[1] if len(sys.argv) > 1 else "all"
    with tempfile.TemporaryDirectory() as tmp:
        if part in ("all", "first-async"):
            print_ok(run_world(__file__, 2, ["first-async", os.path.join(tmp, "new", "runs",
                                                                         "ckpt")]))
        if part in ("all", "fail-one"):
            print_ok(run_world(__file__, 2, ["fail-one", os.path.join(tmp, "failing")]))
        if part in ("all", "appstate"):
            run_world(__file__, 2, ["appstate-save", tmp])
            for n in (2, 4, 1):  # as saved, resumed on more ranks and on fewer
                print_ok(run_world(__file__, n, ["appstate-restore", tmp]))
    print("python dcp run ok")
    return 0


if __name__ == "__main__":
    entry(rank_main, main)
