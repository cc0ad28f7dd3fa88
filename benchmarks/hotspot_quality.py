"""worker-hotspots against a full-rate py-spy profile of the same loader: same top function, shares within a few points.

For each loader (CPU-bound numpy work, I/O-bound sleeps and file reads, PIL decode, a heavy collate, a mixed one) the
script runs once under `dlprobe run` (its sampler: one worker at a time, 2 s bursts at 20 Hz, --nonblocking), with
`py-spy record --subprocesses --idle --rate 100` (pausing each process for each sample, the whole tree) attached to
the same training process and workers for the whole run: the same load for both, which on a shared machine moves
shares more than the way of sampling does (run one after the other, a mixed loader's top share differed by 20 points).
Both profiles are ranked by the same code (`measures/fetch_stacks.rank`, the fetch path of the workers only), and the
table shows each one's top function and share, the largest difference of any function's share, and the split the
workers' own clocks measured (blocked share of their batch time). Writes benchmarks/out/hotspot_quality.json.
Usage: python benchmarks/hotspot_quality.py [--loaders cpu,io,pil,collate,mixed] [--seconds 20]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import PYTHON, children, machine, require_py_spy

from dlprobe.analysis.measures.fetch_stacks import in_fetch, in_probe, rank
from dlprobe.analysis.run.stackfile import parse_stacks

OUT = Path(__file__).resolve().parent / "out"
REFERENCE_RATE = 100

LOADER_SCRIPT = r"""
import io, os, sys, time
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

KIND, WORKERS, SECONDS, DATA = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]


def spectral_features(x):          # CPU: FFTs and sorts
    for _ in range(6):
        x = np.sort(np.abs(np.fft.rfft(x, n=4096)))[:2048]
    return x


def normalise(x):                   # CPU, smaller
    return (x - x.mean()) / (x.std() + 1e-6)


def fetch_remote(i):                # I/O: a remote store answering
    time.sleep(0.006)
    return i


def read_blob(i):                   # I/O: a local file read
    with open(os.path.join(DATA, f"blob{i % 32}.bin"), "rb") as f:
        return f.read()


def decode_image(raw):              # PIL decode
    from PIL import Image
    return np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"))


def slow_collate(samples):          # a heavy collate: Python per element
    rows = [[float(v) for v in s.tolist()] for s in samples]
    return torch.tensor(rows)


class Loader(Dataset):
    def __init__(self):
        self.png = open(os.path.join(DATA, "img.png"), "rb").read()

    def __len__(self):
        return 10_000_000

    def __getitem__(self, i):
        if KIND == "cpu":
            x = spectral_features(np.random.default_rng(i).standard_normal(4096))
            return torch.from_numpy(normalise(x)[:64].astype(np.float32))
        if KIND == "io":
            fetch_remote(i)
            raw = read_blob(i)
            return torch.tensor([len(raw)], dtype=torch.float32)
        if KIND == "pil":
            img = decode_image(self.png)
            return torch.from_numpy(img[:8, :8, 0].astype(np.float32))
        if KIND == "collate":
            return torch.from_numpy(np.random.default_rng(i).standard_normal(2048).astype(np.float32))
        # mixed: a wait every 8th sample and twice the work of "cpu"
        if i % 8 == 0:
            fetch_remote(i)
        x = spectral_features(spectral_features(np.random.default_rng(i).standard_normal(4096)))
        return torch.from_numpy(x[:64].astype(np.float32))


if __name__ == "__main__":
    collate = slow_collate if KIND == "collate" else None
    loader = DataLoader(Loader(), batch_size=16, num_workers=WORKERS, collate_fn=collate, persistent_workers=True)
    start, n = time.time(), 0
    for batch in loader:
        time.sleep(0.001)             # a light training step: the loop waits for data
        n += 1
        if time.time() - start > SECONDS:
            break
    print("batches", n)
"""

LOADERS = ("cpu", "io", "pil", "collate", "mixed")


def make_data(path: Path) -> None:
    import numpy as np
    from PIL import Image

    for i in range(32):
        (path / f"blob{i}.bin").write_bytes(os.urandom(256 * 1024))
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (384, 384, 3), dtype=np.uint8)).save(path / "img.png")


def shares(counter: Counter[str]) -> dict[str, float]:
    total = sum(counter.values()) or 1
    return {k: n / total for k, n in counter.most_common()}


def run_both(kind: str, tmp: Path, seconds: float, workers: int, py_spy: str) -> tuple[dict, dict]:
    """One run of the loader under `dlprobe run`, with the full-rate reference attached to the same training process
    and its workers at the same time: both profiles see the same load, which on a shared machine moves shares more
    than either way of sampling does."""
    run_dir, report, ref_out = tmp / f"probed-{kind}", tmp / f"probed-{kind}.json", tmp / f"reference-{kind}.txt"
    cmd = [PYTHON, "-m", "dlprobe", "run", "--quiet", "--out", str(run_dir), "--json", str(report),
           str(tmp / "loader.py"), kind, str(workers), str(seconds), str(tmp)]  # fmt: skip
    probe = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    target = None
    while target is None and time.time() < deadline:  # the training process, once it runs the bootstrap (not before
        for pid in children(probe.pid):  # its exec, where py-spy finds no Python)
            with contextlib.suppress(OSError):
                if b"dlprobe.in_training.bootstrap" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    target = pid
        time.sleep(0.05)
    time.sleep(0.5)  # the interpreter past its own start-up, so py-spy finds its Python version
    ref = subprocess.Popen([py_spy, "record", "--pid", str(target), "--subprocesses", "--idle", "--rate",
                            str(REFERENCE_RATE), "--format", "raw", "--output", str(ref_out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    if probe.wait(timeout=600) != 0:
        raise SystemExit(f"dlprobe run failed on {kind}")
    ref.wait(timeout=60)  # py-spy writes its file once the processes it sampled are gone
    if not ref_out.exists():
        raise SystemExit(f"the reference py-spy saved nothing for {kind} (exit code {ref.returncode})")
    return mine_of(run_dir, report), reference_of(ref_out)


def mine_of(run_dir: Path, report: Path) -> dict:
    data = json.loads(report.read_text())
    [finding] = [f for f in data["findings"] if f["code"] == "worker-hotspots"] or [None]
    meta = json.loads((run_dir / "stacks.json").read_text())
    if finding is None:
        return {"finding": None, "spy_cpu_s": meta.get("cpu_s")}
    ev = finding["evidence"]
    return {
        "finding": finding["title"],
        "functions": {row["function"]: row["share"] for row in ev["top_functions"]},
        "samples": ev["samples"],
        "blocked_share": (ev.get("loading_time") or {}).get("fetch_blocked_share"),
        "collate_share": (ev.get("loading_time") or {}).get("collate_share"),
        "spy_cpu_s": meta.get("cpu_s"),
        "window_s": meta.get("window_s"),
    }


def reference_of(out: Path) -> dict:
    stacks = parse_stacks(out.read_text(errors="replace"))
    # Only the workers' fetch path (the main process never fetches with workers), less the samples inside the probe's
    # own clock reads, as the finding leaves them out (this reference samples the same probed workers); py-spy's raw
    # format is a total over the whole run, dlprobe's over its window.
    _, functions, _ = rank([s for s in in_fetch(stacks) if not in_probe(s)])
    total = sum(functions.values())
    return {"functions": {f: round(n / total, 3) for f, n in functions.most_common(6)}, "samples": total}


def compare(mine: dict, ref: dict) -> dict:
    if not mine.get("functions") or not ref.get("functions"):
        return {"same_top": False, "top_diff_pts": None, "max_diff_pts": None}
    top_mine, top_ref = next(iter(mine["functions"])), next(iter(ref["functions"]))
    names = set(mine["functions"]) | set(ref["functions"])
    diffs = [abs(mine["functions"].get(n, 0.0) - ref["functions"].get(n, 0.0)) for n in names]
    return {
        "same_top": top_mine == top_ref,
        "top_diff_pts": round(100 * abs(mine["functions"][top_mine] - ref["functions"].get(top_mine, 0.0)), 1),
        "max_diff_pts": round(100 * max(diffs), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--loaders", default=",".join(LOADERS))
    parser.add_argument("--seconds", type=float, default=20.0, help="each run's loop (the sampler needs 10-20 s)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    py_spy = require_py_spy()
    print(f"machine: {machine()}; load {os.getloadavg()}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "loader.py").write_text(LOADER_SCRIPT)
        make_data(tmp)
        for kind in args.loaders.split(","):
            mine, ref = run_both(kind, tmp, args.seconds, args.workers, py_spy)
            results[kind] = {"dlprobe": mine, "reference": ref, **compare(mine, ref)}
            print(json.dumps({kind: results[kind]}), flush=True)
    print(
        f"\n{'loader':8} | dlprobe top (share, samples) | py-spy {REFERENCE_RATE} Hz top (share, samples) | "
        "same top | top diff | max diff | blocked (clocks) | py-spy CPU"
    )
    for kind, r in results.items():
        mine, ref = r["dlprobe"], r["reference"]
        mt = next(iter((mine.get("functions") or {"-": 0.0}).items()))
        rt = next(iter((ref.get("functions") or {"-": 0.0}).items()))
        blocked = mine.get("blocked_share")
        print(f"{kind:8} | {mt[0]} ({100 * mt[1]:.0f}%, {mine.get('samples')}) | {rt[0]} ({100 * rt[1]:.0f}%, "
              f"{ref.get('samples')}) | {'yes' if r['same_top'] else 'NO'} | {r['top_diff_pts']} pts | "
              f"{r['max_diff_pts']} pts | {'-' if blocked is None else f'{100 * blocked:.0f}%'} | "
              f"{mine.get('spy_cpu_s')} s")  # fmt: skip
    print(f"load after: {os.getloadavg()}")
    OUT.mkdir(exist_ok=True)
    (OUT / "hotspot_quality.json").write_text(json.dumps({"machine": machine(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
