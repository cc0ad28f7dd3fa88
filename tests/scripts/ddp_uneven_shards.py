"""torchrun, 2 ranks x 2 workers over 2 stream shards: shards go to (rank, worker) slots, so rank 0's two workers
get both shards and rank 1 gets none. The ranks meet only once at the end, so the job finishes instead of hanging."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

SHARDS = [list(range(0, 200)), list(range(200, 400))]


class ShardStream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        rank, world = dist.get_rank(), dist.get_world_size()
        for shard in SHARDS[rank * nw + wid :: world * nw]:
            for i in shard:
                yield torch.tensor([float(i)])


if __name__ == "__main__":
    dist.init_process_group("gloo")
    loader = DataLoader(ShardStream(), batch_size=4, num_workers=2)
    count = torch.zeros(1)
    for batch in loader:
        count += len(batch)
    dist.all_reduce(count)
    print(f"rank {dist.get_rank()} samples {int(count.item())}", flush=True)
    dist.destroy_process_group()
