"""Smallest useful DDP check: every rank joins the process group (NCCL on GPUs, gloo without),
all-reduces its rank, then trains a small model wrapped in DistributedDataParallel for a few
steps, each rank on its own data. Rank 0 prints what each rank saw and whether the parameters
and gradients are bit-for-bit the same on every rank, as DDP's averaged gradients keep them.
Exits 1 when a check fails.

Works started by srun (RANK/WORLD_SIZE/LOCAL_RANK exported from SLURM_* as in
pytorch-ddp.sbatch) and by torchrun (which sets them itself).
"""
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

STEPS = 5


def device_and_backend():
    if not torch.cuda.is_available():
        return torch.device("cpu"), "gloo", "CPU"
    # With one GPU per task, Slurm's binding leaves one visible GPU (index 0); with a whole node
    # per task (torchrun) each worker takes its LOCAL_RANK-th GPU.
    index = int(os.environ["LOCAL_RANK"]) if torch.cuda.device_count() > 1 else 0
    torch.cuda.set_device(index)
    return torch.device("cuda", index), "nccl", f"GPU {torch.cuda.get_device_name()}"


def train(device, rank):
    """A few DDP steps on rank-specific data; returns (first loss, last loss, params, grads)."""
    torch.manual_seed(0)  # DDP broadcasts rank 0's initial parameters anyway
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    ids = [device.index] if device.type == "cuda" else None
    ddp = DistributedDataParallel(model.to(device), device_ids=ids)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    losses = []
    for _ in range(STEPS):
        x = torch.randn(64, 16, generator=data).to(device)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), x.sum(1, keepdim=True))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = torch.cat([p.detach().flatten() for p in ddp.parameters()])
    grads = torch.cat([p.grad.flatten() for p in ddp.parameters()])
    return losses[0], losses[-1], params, grads


def same_everywhere(t, world):
    """Whether every rank holds exactly this tensor."""
    copies = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(copies, t)
    return all(torch.equal(c, copies[0]) for c in copies)


def main() -> int:
    device, backend, where = device_and_backend()
    dist.init_process_group(backend)  # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the env
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank)], device=device)
    dist.all_reduce(t)
    seen = [None] * world
    dist.all_gather_object(seen, f"rank {rank}/{world} on {socket.gethostname()} {where} ({backend})")
    first, last, params, grads = train(device, rank)
    expected = world * (world - 1) / 2
    checks = {
        f"all_reduce sum {t.item():.0f}, expected {expected:.0f}": t.item() == expected,
        f"DDP {STEPS} steps (rank {rank} loss {first:.3f} -> {last:.3f}): parameters equal on all ranks":
            same_everywhere(params, world),
        "gradients equal on all ranks": same_everywhere(grads, world),
    }
    if rank == 0:
        print("\n".join(seen))
        for what, ok in checks.items():
            print(f"{what}:", "OK" if ok else "WRONG")
    dist.destroy_process_group()
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
