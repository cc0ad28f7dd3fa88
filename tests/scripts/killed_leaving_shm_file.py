"""Killed (SIGKILL) between creating a torch-named shared-memory file and unlinking it, as torch's processes are when
torchrun stops a rank: the file stays in /dev/shm. Prints the file's name first."""

import os
import signal

name = f"/dev/shm/torch_{os.getpid()}_dlprobe_test_0"
with open(name, "wb") as f:
    f.write(b"\0" * 65536)
print(os.path.basename(name), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
