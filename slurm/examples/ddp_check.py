"""Smallest useful DDP check: every rank joins the process group over NCCL, all-reduces its rank,
and rank 0 prints the sum (0 + 1 + ... + WORLD_SIZE-1) and what each rank saw.

Works started by srun (RANK/WORLD_SIZE/LOCAL_RANK exported from SLURM_* as in
pytorch-ddp.sbatch) and by torchrun (which sets them itself).
"""
import os
import socket

import torch
import torch.distributed as dist


def main() -> None:
    local_rank = int(os.environ["LOCAL_RANK"])
    # With one GPU per task, Slurm's binding leaves one visible GPU (index 0); with a whole node
    # per task (torchrun) each worker takes its LOCAL_RANK-th GPU.
    device = local_rank if torch.cuda.device_count() > 1 else 0
    torch.cuda.set_device(device)
    dist.init_process_group("nccl")  # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the env
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank)], device="cuda")
    dist.all_reduce(t)
    info = f"rank {rank}/{world} on {socket.gethostname()} GPU {torch.cuda.get_device_name()}"
    seen = [None] * world
    dist.all_gather_object(seen, info)
    if rank == 0:
        print("\n".join(seen))
        expected = world * (world - 1) / 2
        print(f"all_reduce sum {t.item():.0f}, expected {expected:.0f}:", "OK" if t.item() == expected else "WRONG")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
