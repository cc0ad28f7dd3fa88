"""The Prometheus exporter's cost: `dlprobe run` with `--prom-textfile DIR --prom-listen PORT` (and a scraper reading
/metrics every second, as Prometheus would) against `dlprobe run` without them, on the same loader-bound script.

Alternates the two (off on, on off, off on, ...) and prints the medians of the per-round ratios (on / off), so the load
of other users of the machine hits both sides alike: training throughput, whole wall time, and the supervisor's
CPU share. Then the exporter's own CPU per refresh, timed in this process on a synthetic run of 8 and 64 workers
(build the families, render, write the textfile), as a share of one core at the refresh rate.

Target (issue 46): the probe's cost with the exporter on stays under 2% (throughput ratio >= 0.98). On a shared
2-core machine the rounds' throughput ratios spread far wider than that (other jobs' load), so the supervisor's own
CPU added by the exporter (cpu_share_added, read from result.json: what the exporter takes from the training at
most) is the figure that resolves it.
Writes benchmarks/out/prom_overhead.json.
Usage: python benchmarks/prom_overhead.py [--rounds N] [--workers 8] [--scale 1]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _common import PYTHON, machine, median, parse_metric, run
from probe_overhead import LOADER_SCRIPT, SETUPS, wait_for_plot

OUT = Path(__file__).resolve().parent / "out"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Scraper:
    """GET /metrics every second while the run lasts, as a Prometheus at a 1 s scrape interval would."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.stop = threading.Event()
        self.scrapes = 0
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(1.0):
            try:
                with urllib.request.urlopen(self.url, timeout=2) as response:  # noqa: S310 - loopback
                    response.read()
                self.scrapes += 1
            except OSError:  # noqa: S112 - not listening yet, or already closed: the next second tries again
                continue

    def __enter__(self) -> Scraper:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join()


def one_run(args: list[str], run_dir: Path, exporter: Path | None) -> dict[str, float]:
    command = [PYTHON, "-m", "dlprobe", "run", "--quiet", "--out", str(run_dir)]
    if exporter is None:
        proc, wall = run([*command, *args])
        scrapes = 0
    else:
        port = free_port()
        command += ["--prom-textfile", str(exporter), "--prom-listen", str(port)]
        with Scraper(port) as scraper:
            proc, wall = run([*command, *args])
        scrapes = scraper.scrapes
    wait_for_plot(run_dir)  # its background plot must not load the next run
    result = json.loads((run_dir / "result.json").read_text())
    assert "problems" not in result, result["problems"]
    return {"throughput": parse_metric(proc.stdout, "throughput"), "wall_s": wall,
            "cpu_share": result["supervisor"]["cpu_share"], "scrapes": scrapes}  # fmt: skip


def render_cost(workers: int, directory: Path, repeats: int = 200) -> float:
    """CPU seconds of one refresh (families, render, textfile) for a run of one rank with `workers` workers."""
    from dlprobe.supervisor.prom.exposition import render
    from dlprobe.supervisor.prom.metrics import JobLabels, LiveState, families
    from dlprobe.supervisor.prom.textfile import Textfile
    from dlprobe.supervisor.run_watch import Progress
    from dlprobe.supervisor.sampler import Sampler

    progress, sampler = Progress(), Sampler(os.getpid(), io.StringIO(), None)
    pids = list(range(10_000, 10_000 + workers))
    progress.feed([{"ev": "process", "pid": 100, "rank": 0, "local_rank": 0, "host": "h"},
                   {"ev": "start_method", "pid": 100, "loader": 0, "start_method": "fork"},
                   {"ev": "epoch", "pid": 100, "loader": 0,
                    "workers": [{"pid": pid, "worker_id": i} for i, pid in enumerate(pids)]},
                   {"ev": "batches", "pid": 100, "t": 1.0, "loader": 0, "waits": [0.01], "total": 1}],
                  sampler)  # fmt: skip
    reading = {
        "rss": 1 << 30,
        "uss": 1 << 28,
        "pss": 1 << 29,
        "swap": 0,
        "anon": 1 << 28,
        "private_dirty": 1 << 28,
        "private_clean": 0,
        "pss_anon": 1 << 28,
        "pss_file": 1 << 20,
        "pss_shmem": 1 << 10,
        "cpu": 12.5,
        "fd": 40,
    }
    sampler.last = {pid: dict(reading) for pid in [100, *pids]}
    sampler.last_system = {"shm": {"used": 1 << 20, "total": 1 << 30}, "avail": 1 << 34, "cg": {"usage": 1, "limit": 2}}
    textfile = Textfile(directory, "bench", os.getpid())
    state = LiveState(progress, sampler, 100, time.time(), 0, 0)
    start = time.process_time()
    for _ in range(repeats):
        textfile.write(render(families(JobLabels("bench", "h"), state)))
    cost = (time.process_time() - start) / repeats
    textfile.remove()
    return cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--scale", type=float, default=1.0, help="batches x this")
    options = parser.parse_args()
    from dlprobe.supervisor.prom.exporter import REFRESH_S

    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    batches, work = SETUPS.get(options.workers, (300, 4))
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        script = tmp / "loader_bound.py"
        script.write_text(LOADER_SCRIPT)
        collector = tmp / "collector"
        collector.mkdir()
        args = [str(script), str(options.workers), str(int(batches * options.scale)), str(work)]
        for i in range(options.rounds):
            # off-on, then on-off: a machine getting busier or quieter during a round weighs on both sides alike
            if i % 2 == 0:
                off = one_run(args, tmp / f"off-{i}", None)
                on = one_run(args, tmp / f"on-{i}", collector)
            else:
                on = one_run(args, tmp / f"on-{i}", collector)
                off = one_run(args, tmp / f"off-{i}", None)
            rows.append({"throughput_ratio": on["throughput"] / off["throughput"],
                         "wall_ratio": on["wall_s"] / off["wall_s"], "cpu_share_off": off["cpu_share"],
                         "cpu_share_on": on["cpu_share"], "cpu_share_added": on["cpu_share"] - off["cpu_share"],
                         "scrapes": on["scrapes"],
                         "wall_off_s": off["wall_s"]})  # fmt: skip
            print(f"  round {i + 1}: {rows[-1]}", flush=True)
        costs = {n: render_cost(n, collector) for n in (8, 64)}
    summary = {key: median([r[key] for r in rows]) for key in rows[0]}
    summary["throughput_ratio_min"] = min(r["throughput_ratio"] for r in rows)
    summary["throughput_ratio_max"] = max(r["throughput_ratio"] for r in rows)
    per_refresh = {f"refresh_cpu_s_{n}_workers": cost for n, cost in costs.items()}
    shares = {f"refresh_core_share_{n}_workers": cost / REFRESH_S for n, cost in costs.items()}
    print(
        f"\nmedians of {options.rounds} alternating rounds (off, on), {options.workers} workers; "
        "on / off within a round"
    )
    print(f"throughput ratio {summary['throughput_ratio']:.3f} ({summary['throughput_ratio_min']:.3f}-"
          f"{summary['throughput_ratio_max']:.3f}); wall ratio {summary['wall_ratio']:.3f}; supervisor CPU "
          f"{100 * summary['cpu_share_off']:.2f}% off, {100 * summary['cpu_share_on']:.2f}% on of one core (added "
          f"{100 * summary['cpu_share_added']:+.2f} points, median within a round); "
          f"{summary['scrapes']:.0f} scrapes per run")  # fmt: skip
    for n, cost in costs.items():
        print(f"one refresh, {n} workers: {1e3 * cost:.2f} ms of CPU = {100 * cost / REFRESH_S:.3f}% of a core "
              f"every {REFRESH_S:g} s")  # fmt: skip
    print("target: throughput ratio >= 0.98 (the exporter's cost under 2%)")
    OUT.mkdir(exist_ok=True)
    record = {"machine": machine(), "rounds": options.rounds, "workers": options.workers, "summary": summary,
              **per_refresh, **shares, "rows": rows}  # fmt: skip
    (OUT / "prom_overhead.json").write_text(json.dumps(record, indent=1))
    print(f"wrote {OUT / 'prom_overhead.json'}")


if __name__ == "__main__":
    main()
