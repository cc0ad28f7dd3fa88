"""Asks for fork itself; each worker reports the start method that really made it, read from its own command line
(spawn: `spawn_main`, forkserver: the fork server's `forkserver import main`, fork: the parent's own command line)."""

from torch.utils.data import DataLoader, Dataset


def _method_of_this_process() -> str:
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = f.read().replace(b"\0", b" ").decode()
    if "spawn_main" in cmdline:
        return "spawn"
    return "forkserver" if "forkserver" in cmdline else "fork"


class Methods(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return ["fork", "spawn", "forkserver"].index(_method_of_this_process())


if __name__ == "__main__":
    loader = DataLoader(Methods(), batch_size=4, num_workers=2, multiprocessing_context="fork")
    seen = {["fork", "spawn", "forkserver"][int(v)] for b in loader for v in b}
    print("worker start methods:", ",".join(sorted(seen)))
