#!/usr/bin/env python3
"""FSDP2 (fully_shard) and DTensor state dicts through libckpt's own API (torch 2.x: the torch2
virtual environment; tests/python/t-python-fsdp2.sh): 2 gloo ranks on a CPU mesh train a model,
take get_state_dict(model, optimizer) (DTensor leaves, optimizer state keyed by FQN, param groups)
and save it with Store.save(group=...) twice (the second save after one bias changed, which
writes only that bias's chunks); 4 ranks and 1 rank then build the model sharded their way,
restore each step with Store.restore and set_state_dict, and hold the saved full state bit for
bit; one process without torch.distributed loads the consolidated tensors (Store.load).
"""

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fsdp2_common import (ROOT, apply_state, build, entry, full_state, init_rank,  # noqa: E402
                          print_ok, run_world, same_state, sharded_state, train)
sys.path.insert(0, os.path.join(ROOT, "python"))


def ref_path(store, step):
    return os.path.join(os.path.dirname(store), f"ref-{step}.pt")


def role_save(rank, world, store):
    import torch
    import libckpt
    m, opt = build(world)
    train(m, opt, 2, seed=1)
    with libckpt.Store(store) as st:
        for step in (1, 2):
            if step == 2:
                with torch.no_grad():
                    m[4].bias.add_(1.0)
            st.save(sharded_state(m, opt), step)  # collective: the default group
            full = full_state(m, opt)
            if rank == 0:
                torch.save(full, ref_path(store, step))


def role_restore(rank, world, store, step):
    import torch
    import libckpt
    m, opt = build(world, seed=5)
    train(m, opt, 1, seed=9)  # other values; optimizer state exists to be restored into
    state = sharded_state(m, opt)
    with libckpt.Store(store, read_only=True) as st:
        got = st.restore(state, step)
    assert got == step, got
    apply_state(m, opt, state)
    full = full_state(m, opt)
    if rank == 0:
        same_state(full, torch.load(ref_path(store, step)), f"step {step} on {world} ranks")
        print(f"ok: step {step} restored on {world} ranks bit for bit", flush=True)


def rank_main(argv):
    import torch.distributed as dist
    rank, world, args = init_rank(argv)
    if args[0] == "save":
        role_save(rank, world, args[1])
    else:
        role_restore(rank, world, args[1], int(args[2]))
    dist.barrier()
    dist.destroy_process_group()
    print("RESULT ok", flush=True)


def main():
    import torch
    import libckpt
    if libckpt.dtensor_module() is None:
        print(f"skip: torch {torch.__version__} has no DTensor / FSDP2")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        libckpt.Store(store, create=True, chunk_size="64K").close()
        run_world(__file__, 2, ["save", store])
        with libckpt.Store(store, read_only=True) as st:
            new = {i["step"]: i["new_bytes"] for i in st.list()}
            assert sorted(new) == [1, 2], new
            assert 0 < new[2] <= new[1] // 10, f"one changed bias wrote {new[2]} of {new[1]} bytes"
            print(f"ok: 2 ranks saved 2 steps; the second (one bias changed) wrote {new[2]} of "
                  f"{new[1]} bytes")
            flat = st.load(2)
        ref = torch.load(ref_path(store, 2))
        w = ref["model.4.bias"]
        got = flat["model"]["4.bias"] if "4.bias" in flat.get("model", {}) else None
        assert got is not None and torch.equal(got, w), "Store.load: model 4.bias differs"
        print("ok: Store.load gives the consolidated tensors")
        for n, step in ((4, 2), (1, 1)):
            outs = run_world(__file__, n, ["restore", store, str(step)])
            print_ok(outs)
    print("python fsdp2 ok")
    return 0


if __name__ == "__main__":
    entry(rank_main, main)
