#!/usr/bin/python3
"""A small PyTorch training loop that checkpoints asynchronously with libckpt and resumes from
the latest checkpoint after being killed (even with SIGKILL in the middle of a save).

    /usr/bin/python3 examples/train_resume.py --store /tmp/run1 --steps 300 --every 25
    # kill it at any time (kill -9), run the same command again: it continues where the latest
    # durable checkpoint left off and ends with the same parameters as an uninterrupted run.

What is saved, every --every steps: the model, the optimizer (Adam, with its per-parameter
state), the number of completed steps, and the random number generators (torch, CUDA, numpy,
Python), so that the resumed run is bit-for-bit the uninterrupted one (on the CPU; CUDA kernels
are deterministic here too, but that depends on the GPU libraries).

The save overlaps training: save_async() returns at once; the next forward and backward run while
libckpt copies the tensors; wait_snapshot() is called only right before optimizer.step(), the first
thing that modifies saved tensors (a model with buffers updated in forward, like BatchNorm's
running statistics, must wait before the forward instead). On CUDA, libckpt also orders the
copies after the work queued on torch's current stream, and makes that stream wait for them.
The durability of a checkpoint is checked (handle.wait()) just before the next one is started;
then the checkpoints older than the newest --keep are pruned (the store's space stays bounded).

Output, one line each: "resumed from checkpoint S" (or "starting fresh"), "step N loss L" (every
--print-every steps), "checkpoint S durable new_bytes B", and at the end
"done steps N loss L digest D" (D: a hash of every parameter's bytes).
"""

import argparse
import hashlib
import os
import random
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import libckpt  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self, d_in=32, d_hidden=64, d_out=8):
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, d_hidden)
        self.drop = torch.nn.Dropout(0.1)  # uses the RNG: its state is part of the checkpoint
        self.fc2 = torch.nn.Linear(d_hidden, d_hidden)
        self.head = torch.nn.Linear(d_hidden, d_out)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = self.drop(x)
        x = torch.relu(self.fc2(x))
        return self.head(x)


def batch(step, args, device):
    """The data of one step depends only on the step (a data loader would save its position)."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    x = torch.randn(args.batch, 32, generator=g)
    w = torch.linspace(-1, 1, 32 * 8).reshape(32, 8)
    y = torch.sin(x @ w) + 0.01 * torch.randn(args.batch, 8, generator=g)
    return x.to(device), y.to(device)


def rng_state(device):
    st = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
          "python": random.getstate()}
    if device.type == "cuda":
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def set_rng_state(st, device):
    torch.set_rng_state(st["torch"])
    np.random.set_state(st["numpy"])
    random.setstate(st["python"])
    if device.type == "cuda" and "cuda" in st:
        torch.cuda.set_rng_state_all(st["cuda"])


def digest(model):
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", required=True, help="checkpoint directory (created if missing)")
    ap.add_argument("--steps", type=int, default=300, help="total training steps")
    ap.add_argument("--every", type=int, default=25, help="checkpoint every N steps")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: deterministic)")
    ap.add_argument("--keep", type=int, default=3,
                    help="keep the newest N checkpoints, prune the older ones (0: keep all)")
    ap.add_argument("--print-every", type=int, default=1)
    ap.add_argument("--step-delay", type=float, default=0.0,
                    help="seconds of extra 'work' per step (to make a small run last)")
    args = ap.parse_args()

    device = torch.device(args.device if args.device != "auto" else
                          ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    random.seed(args.seed)

    model = Net().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    store = libckpt.Store(args.store, pool_size="64M")
    start = 0
    if store.latest_step() is not None:
        state = store.load()  # new CPU tensors; load_state_dict copies them to the device
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        set_rng_state(state["rng"], device)
        start = state["step"]
        print(f"resumed from checkpoint {start}", flush=True)
    else:
        print("starting fresh", flush=True)

    pending = None  # the save in flight
    snap = None     # the save whose snapshot may still be running
    loss = None
    for step in range(start, args.steps):
        model.train()
        x, y = batch(step, args, device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if snap is not None:
            snap.wait_snapshot()  # optimizer.step() modifies the saved tensors
            snap = None
        opt.step()
        done = step + 1
        if args.print_every and done % args.print_every == 0:
            print(f"step {done} loss {loss.item():.6f}", flush=True)
        if args.step_delay:
            time.sleep(args.step_delay)
        if done % args.every == 0 or done == args.steps:
            if pending is not None:
                st = pending.wait()  # the previous checkpoint is durable
                print(f"checkpoint {st.step} durable new_bytes {st.bytes_stored}", flush=True)
                if args.keep:
                    # no save in flight now: prune may take the writer lock (kill-safe)
                    store.prune(keep_last=args.keep)
            state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": done,
                     "rng": rng_state(device)}
            pending = snap = store.save_async(state, done, metadata={"loss": f"{loss.item():.6f}"})
    if pending is not None:
        st = pending.wait()
        print(f"checkpoint {st.step} durable new_bytes {st.bytes_stored}", flush=True)
    store.close()
    final = f"{loss.item():.6f}" if loss is not None else "nan"
    print(f"done steps {args.steps} loss {final} digest {digest(model)}", flush=True)


if __name__ == "__main__":
    main()
