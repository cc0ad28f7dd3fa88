"""`dlprobe run`'s worker advice against what the advised setting then does: predicted against measured throughput.

For each loader (I/O-bound: 8 ms sleeps per sample; CPU-bound: 2 ms of spinning per sample) the script runs it under
`dlprobe run` at a starting num_workers, reads input-bound's advice (the suggested num_workers, the rate now and the
rate the model, dlprobe/loader_model/rate.py, predicts for it), then runs it again at the suggested num_workers, 20
batches a worker at least, and measures the loop's steady rate the same way (loop_timing: batches over the time after
each epoch's first batch). The error is predicted / measured - 1. A loader whose advice keeps its num_workers is
measured at the same count (the prediction is then the rate now). Writes benchmarks/out/run_advice.json.
Usage: python benchmarks/run_advice.py [--loaders io,cpu] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from _common import PYTHON, machine, run

from dlprobe.analysis.measures.loop_timing import loop_timing
from dlprobe.analysis.run.model import load_run

SCRIPTS = Path(__file__).resolve().parent.parent / "tests" / "scripts"
OUT = Path(__file__).resolve().parent / "out"
# name: (script, starting num_workers, extra args after num_workers, args before it); batches enough for ~5 s
LOADERS = {
    "io": ("io_bound_loader.py", 2, ["120"], []),
    "cpu": ("cpu_bound_loader.py", 1, ["120"], []),
}


def _dlprobe(script: str, args: list[str], out: Path) -> dict:
    run([PYTHON, "-m", "dlprobe", "run", "--quiet", "--out", str(out), str(SCRIPTS / script), *args], timeout=900)
    return json.loads((out / "report.json").read_text())


def _steady_rate(out: Path) -> float | None:
    timing = loop_timing(load_run(out).loaders[0])
    return timing.batches / timing.span_s if timing is not None and timing.span_s > 0 else None


def measure(name: str, tmp: Path) -> dict:
    script, nw, tail, head = LOADERS[name]
    first = _dlprobe(script, [*head, str(nw), *tail], tmp / f"{name}-advice")
    advice = next((f for f in first["findings"] if f["code"] == "input-bound"), None)
    row: dict = {"loader": name, "num_workers": nw, "advice": None}
    if advice is None:
        return row
    e = advice["evidence"]
    suggested = int(e.get("suggested_num_workers") or nw)
    predicted = e.get("predicted_batches_per_s") or e.get("batches_per_s")
    # 20 batches a worker at least: fewer, and starting the workers is most of what is timed
    longer = [str(max(int(tail[0]), 20 * suggested)), *tail[1:]]
    _dlprobe(script, [*head, str(suggested), *longer], tmp / f"{name}-measured")
    measured = _steady_rate(tmp / f"{name}-measured")
    row.update(
        advice=advice["fix"][:200],
        bound=e.get("bound"),
        model_limit=e.get("model_limit"),
        suggested=suggested,
        rate_now=e.get("batches_per_s"),
        predicted=predicted,
        measured=None if measured is None else round(measured, 2),
        error=None if not (measured and predicted) else round(predicted / measured - 1, 3),
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loaders", default=",".join(LOADERS))
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="dlprobe-run-advice-") as tmp:
        for _ in range(args.rounds):
            for name in args.loaders.split(","):
                rows.append(measure(name, Path(tmp)))
                r = rows[-1]
                print(f"{name:6} {r['num_workers']:>2} -> {r.get('suggested', '-')!s:>3} workers  "
                      f"now {r.get('rate_now')!s:>8} batches/s  predicted {r.get('predicted')!s:>8}  "
                      f"measured {r.get('measured')!s:>8}  error {r.get('error')!s:>7}  ({r.get('model_limit')})",
                      flush=True)  # fmt: skip
    errors = [abs(r["error"]) for r in rows if r.get("error") is not None]
    summary = {"machine": machine(), "load": os.getloadavg(), "rows": rows,
               "median_abs_error": round(statistics.median(errors), 3) if errors else None}  # fmt: skip
    OUT.mkdir(exist_ok=True)
    (OUT / "run_advice.json").write_text(json.dumps(summary, indent=2))
    print(f"median |error| {summary['median_abs_error']}  load {summary['load']}  on {summary['machine']}")


if __name__ == "__main__":
    main()
