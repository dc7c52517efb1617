#!/usr/bin/python3
"""Data-parallel training on N CPU processes (torch.distributed gloo, DistributedDataParallel)
that checkpoints with libckpt every --every steps and resumes after a kill on any number of
processes.

    /usr/bin/python3 examples/train_ddp_resume.py --store /tmp/ddp --nproc 4 --steps 60 --every 10
    # kill one of its processes (kill -9): the others stop within --timeout seconds (their
    # collectives fail); then resume, here on 2 processes:
    /usr/bin/python3 examples/train_ddp_resume.py --store /tmp/ddp --nproc 2 --steps 60 --every 10

It launches its --nproc workers itself (init_method file://, no network); under torchrun (RANK,
WORLD_SIZE and MASTER_ADDR set) each process is a worker.

What every rank saves, as one multi-rank checkpoint (Store.save_async(state, step), collective
over the default group):
- the model and the Adam optimizer: identical on every rank (DDP), so replicated: saved once,
  each rank writing about 1/N of it;
- an exponential moving average of the parameters kept *sharded* (as ZeRO shards optimizer
  state): rank r holds its slice of the flattened parameter vector, a libckpt.Shard.  On resume
  with another number of processes each rank restores its new slice (Shard targets), whatever the
  split of the save;
- the number of completed steps.
The data of a step depends only on the step: rank r trains on its slice of the global batch.

save_async returns once the tensors are copied; the commit (this rank's part, then the global
manifest, collective) runs on a background thread while training continues, on libckpt's own
gloo group, so it never meets DDP's all-reduces.  The next save waits for it.

Output (rank 0): "resumed from checkpoint S on N processes digest D ema E" (or "starting fresh on
N processes"), "step K loss L", "checkpoint S saved digest D ema E" (digests of the parameters and
of the consolidated EMA when it was saved), "checkpoint S durable", "done steps K loss L digest D".
"""

import argparse
import datetime
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import libckpt  # noqa: E402

GLOBAL_BATCH = 64  # divisible by 1, 2, 4, 8 processes


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def batch(step, rank, world, seed):
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    x = torch.randn(GLOBAL_BATCH, 32, generator=g)
    y = torch.sin(x @ torch.linspace(-1, 1, 32 * 8).reshape(32, 8))
    n = GLOBAL_BATCH // world
    return x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n]


def my_slice(total, rank, world):
    """Rank's [start, end) of a vector of `total` elements split as torch.chunk splits it."""
    chunk = -(-total // world)
    start = min(rank * chunk, total)
    return start, min(start + chunk, total)


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def digest(t):
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]


def ema_digest(ema, total):
    """Digest of the whole EMA vector, gathered from every rank's shard (uneven shards padded)."""
    world = dist.get_world_size()
    chunk = -(-total // world)
    mine = torch.zeros(chunk)
    mine[:ema.numel()] = ema
    parts = [torch.zeros(chunk) for _ in range(world)]
    dist.all_gather(parts, mine)
    return digest(torch.cat(parts)[:total])


def worker(args):
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = Net()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    total = flat_params(model).numel()
    a, b = my_slice(total, rank, world)
    ema = flat_params(model)[a:b].clone()
    state = {"model": model, "optim": opt, "step": 0,
             "ema": libckpt.Shard(ema, global_shape=(total,), offset=(a,))}
    say = print if rank == 0 else (lambda *x, **k: None)

    # rank 0 creates the store before the others open it: ranks creating one directory at
    # once would each write a store header of their own
    if rank == 0:
        libckpt.Store(args.store, create=True).close()
    dist.barrier()
    store = libckpt.Store(args.store, pool_size="16M")
    start = 0
    if store.latest_step() is not None:
        store.restore(state)  # collective: each rank its EMA slice, the model and optimizer whole
        start = state["step"]
        say(f"resumed from checkpoint {start} on {world} processes digest "
            f"{digest(flat_params(model))} ema {ema_digest(ema, total)}", flush=True)
    else:
        say(f"starting fresh on {world} processes", flush=True)

    pending, loss = None, None
    for step in range(start, args.steps):
        x, y = batch(step, rank, world, args.seed)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradients (averaged over the global batch)
        opt.step()
        with torch.no_grad():
            ema.mul_(0.9).add_(flat_params(model)[a:b], alpha=0.1)
        done = step + 1
        state["step"] = done
        loss = loss.detach().clone()
        dist.all_reduce(loss)  # the loss over the global batch, whatever the number of processes
        loss /= world
        say(f"step {done} loss {loss.item():.6f}", flush=True)
        if done % args.every == 0 or done == args.steps:
            if pending is not None:
                pending.wait()  # the previous checkpoint is durable on every rank (or raises)
                say(f"checkpoint {pending.step} durable", flush=True)
            pending = store.save_async(state, done, metadata={"loss": f"{loss.item():.6f}"})
            say(f"checkpoint {done} saved digest {digest(flat_params(model))} ema "
                f"{ema_digest(ema, total)}", flush=True)
        if args.die_at == done and rank == args.die_rank:
            os.kill(os.getpid(), signal.SIGKILL)  # for tests: a kill at a known step
    if pending is not None:
        pending.wait()
        say(f"checkpoint {pending.step} durable", flush=True)
    store.close()
    final = f"{loss.item():.6f}" if loss is not None else "nan"
    say(f"done steps {args.steps} loss {final} digest {digest(flat_params(model))}", flush=True)


def launch(args):
    """Starts --nproc workers (this script with --worker RANK); returns the first failure's exit
    status (0 when every worker succeeded)."""
    fd, init = tempfile.mkstemp(prefix="ddp-init-")
    os.close(fd)
    os.unlink(init)
    env = dict(os.environ, GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
    argv = [a for a in sys.argv[1:]]
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv,
                               "--worker", str(r), "--init", init], env=env)
             for r in range(args.nproc)]
    rc = 0
    try:
        while any(p.poll() is None for p in procs):
            bad = [p.returncode for p in procs if p.returncode not in (None, 0)]
            if bad and not rc:
                rc = bad[0]  # the others raise within the group's timeout, then exit
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        if os.path.exists(init):
            os.unlink(init)
    return rc or next((p.returncode for p in procs if p.returncode), 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", required=True, help="checkpoint directory (created if missing)")
    ap.add_argument("--nproc", type=int, default=4, help="worker processes to launch")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=10, help="checkpoint every N steps")
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=30, help="the group's timeout, seconds")
    ap.add_argument("--die-at", type=int, default=None, help="(tests) rank --die-rank SIGKILLs "
                    "itself after this step")
    ap.add_argument("--die-rank", type=int, default=1)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--init", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    timeout = datetime.timedelta(seconds=args.timeout)
    if args.worker is not None:
        dist.init_process_group("gloo", init_method="file://" + args.init, rank=args.worker,
                                world_size=args.nproc, timeout=timeout)
    elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        dist.init_process_group("gloo", timeout=timeout)
    else:
        sys.exit(launch(args))
    worker(args)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
