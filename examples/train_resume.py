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

The checkpoints are made by libckpt.CheckpointManager: the state holds the model, the optimizer
and the random number generators as objects (anything with state_dict() and load_state_dict()),
so resuming is one restore() into freshly built ones.  mgr.save() returns once the tensors are
copied out (the next optimizer step may change them); hashing and writing run in the background,
one save in flight at a time (the next save first waits for the previous one to be durable), and
the checkpoints older than the newest --keep are pruned after each durable save.  On CUDA the
copies are ordered after the work queued on torch's current stream.

Output, one line each: "resumed from checkpoint S" (or "starting fresh"), "step N loss L" (every
--print-every steps), "checkpoint S durable new_bytes B" (printed once the next save has started, or at the end), and
at the end
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


class RNG:
    """The random number generators (torch, CUDA, numpy, Python) as a Stateful object."""

    def __init__(self, device):
        self.device = device

    def state_dict(self):
        st = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
              "python": random.getstate()}
        if self.device.type == "cuda":
            st["cuda"] = torch.cuda.get_rng_state_all()
        return st

    def load_state_dict(self, st):
        torch.set_rng_state(st["torch"])
        np.random.set_state(st["numpy"])
        random.setstate(st["python"])
        if self.device.type == "cuda" and "cuda" in st:
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
    ap.add_argument("--hold-at", type=int, default=None,
                    help="after step N, print 'holding at step N' and wait for a line on stdin "
                         "(lets a test kill it at a known step, whatever the machine's speed)")
    args = ap.parse_args()

    device = torch.device(args.device if args.device != "auto" else
                          ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    random.seed(args.seed)

    model = Net().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    state = {"model": model, "optim": opt, "rng": RNG(device), "step": 0}
    mgr = libckpt.CheckpointManager(args.store, save_interval_steps=args.every,
                                    max_to_keep=args.keep or None, pool_size="64M")
    if mgr.latest_step() is not None:
        mgr.restore(state)  # load_state_dict() on the model, the optimizer and the RNGs
        start = state["step"]
        print(f"resumed from checkpoint {start}", flush=True)
    else:
        start = 0
        print("starting fresh", flush=True)

    def report():
        st = mgr.last_durable
        if st is not None and st.step != reported[0]:
            reported[0] = st.step
            print(f"checkpoint {st.step} durable new_bytes {st.bytes_stored}", flush=True)

    reported = [None]
    loss = None
    for step in range(start, args.steps):
        model.train()
        x, y = batch(step, args, device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        done = step + 1
        if args.print_every and done % args.print_every == 0:
            print(f"step {done} loss {loss.item():.6f}", flush=True)
        if args.step_delay:
            time.sleep(args.step_delay)
        state["step"] = done
        # due every --every steps, and at the end; returns once the tensors are copied
        mgr.save(done, state, force=done == args.steps, metadata={"loss": f"{loss.item():.6f}"})
        report()  # the previous checkpoint, once this save waited for it
        if args.hold_at == done:
            print(f"holding at step {done}", flush=True)
            sys.stdin.readline()
    mgr.close()  # waits for the last save
    report()
    final = f"{loss.item():.6f}" if loss is not None else "nan"
    print(f"done steps {args.steps} loss {final} digest {digest(model)}", flush=True)


if __name__ == "__main__":
    main()
