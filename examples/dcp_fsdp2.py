#!/usr/bin/env python3
"""FSDP2 training on CPU processes (gloo) that checkpoints through DCP into a libckpt store:
dcp.async_save every 5 steps while training goes on, and on a restart dcp.load of the newest
checkpoint (torch 2.6 or later; libckpt.dcp).

    torchrun --nproc-per-node 2 examples/dcp_fsdp2.py /tmp/dcp-ckpt 20
    torchrun --nproc-per-node 2 examples/dcp_fsdp2.py /tmp/dcp-ckpt 30    # resumes at step 20

The store (and its parent directories) is created by the first save. python/README.md ("DCP")
and README.md quote lines of this file; tests/python/t-python-dcp-example.sh checks that they are
this file's and runs it on 2 ranks, stopped and resumed, against an uninterrupted run.
"""

import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import libckpt
from libckpt.dcp import LibckptStorageReader, LibckptStorageWriter

EVERY = 5


class AppState(Stateful):
    """DCP's tutorial wrapper: the model's and the optimizer's state as get_state_dict gives
    them (DTensor leaves), loaded back with set_state_dict."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def state_dict(self):
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def load_state_dict(self, state_dict):
        set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"],
                       optim_state_dict=state_dict["optim"])


def build():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def main(store, steps):
    dist.init_process_group("gloo")  # under torchrun: RANK, WORLD_SIZE, MASTER_ADDR/PORT
    model, optimizer = build()
    state = {"app": AppState(model, optimizer), "step": 0}
    writer = LibckptStorageWriter(store)                  # keep it: it keeps the store and its pool
    with libckpt.Store(store, create=True) as s:
        resume = s.latest_step() is not None
    if resume:                                            # the newest checkpoint, resharded here
        dcp.load(state, storage_reader=LibckptStorageReader(store), checkpoint_id=store)
    fut = None
    for step in range(state["step"], steps):
        x = torch.randn(16, 32, generator=torch.Generator().manual_seed(step))
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % EVERY == 0 or step + 1 == steps:
            if fut is not None:
                fut.result()                              # one save in flight per writer
            state["step"] = step + 1
            # an async save's collectives need a process group of their own (DCP's rule)
            fut = dcp.async_save(state, storage_writer=writer, process_group=writer.async_group,
                                 checkpoint_id=f"{store}/step-{step + 1}")
    if fut is not None:
        fut.result()
    writer.close()
    if dist.get_rank() == 0:
        print(f"{'resumed, ' if resume else ''}trained to step {steps}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)
