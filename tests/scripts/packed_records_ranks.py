"""Each torchrun rank asks for the same shared PackedRecords; says whether it packed them or attached."""

import os

from dlprobe.fixes import PackedRecords

packed_here = []


def load_records():
    packed_here.append(True)  # only the rank that builds the shared copy calls this
    return [{"path": f"/data/{i}.jpg", "label": i % 10} for i in range(100_000)]


records = PackedRecords(load_records, share="ranks-records-v1")
print(f"rank {os.environ['LOCAL_RANK']} packed={bool(packed_here)} n={len(records)} last={records[-1]}", flush=True)
