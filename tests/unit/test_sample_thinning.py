"""samples.jsonl downsampled past its first hour (supervisor/sample_thinning.py): bounded, with each window's
extremes, every move of a process's USS and the readings before a death kept as they were read."""

from __future__ import annotations

from typing import Any

from dlprobe.supervisor.sample_thinning import ReadingThinner

MiB = 1024 * 1024


def _row(t: float, rss: list[int], uss: list[int | None] | None = None, shm: int = 0) -> dict[str, Any]:
    procs = {}
    for i, r in enumerate(rss):
        values: dict[str, Any] = {"rss": r, "cpu": t}
        if uss is not None and uss[i] is not None:
            values["uss"] = uss[i]
        procs[str(100 + i)] = values
    return {"k": "r", "t": t, "p": procs, "shm": {"used": shm, "total": 64 * MiB}, "avail": 8000 * MiB}


def _feed(thinner: ReadingThinner, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        out += thinner.add(row)
    return out + thinner.rest()


def test_the_first_readings_are_all_written_and_the_rest_bounded():
    thinner = ReadingThinner(full_rate=100, window=20)
    rows = [_row(i * 0.25, [200 * MiB, 50 * MiB + (i % 7) * MiB]) for i in range(100 + 20 * 1000)]
    out = _feed(thinner, rows)
    assert out[:100] == rows[:100]
    # each later window of 20 written as its extremes (at most 5 readings; here the RSS's high and low, shm and
    # available memory the same in every reading)
    assert len(out) - 100 <= 5 * 1000 and len(out) - 100 >= 2 * 1000
    assert [r["t"] for r in out] == sorted(r["t"] for r in out)  # in time order, at the times they were read


def test_a_windows_extremes_are_kept_as_read():
    thinner = ReadingThinner(full_rate=0, window=20)
    rss = [100 * MiB + i * MiB for i in range(10)] + [110 * MiB - i * 3 * MiB for i in range(10)]
    shm = [0] * 20
    shm[13] = 40 * MiB  # a /dev/shm burst in one reading
    rows = [_row(i * 0.25, [r], shm=s) for i, (r, s) in enumerate(zip(rss, shm, strict=True))]
    out = _feed(thinner, rows)
    kept_rss = [r["p"]["100"]["rss"] for r in out]
    assert max(kept_rss) == max(rss) and min(kept_rss) == min(rss)
    assert rows[13] in out and len(out) <= 5
    assert all(r in rows for r in out)  # nothing averaged or moved


def test_every_move_of_a_uss_is_kept_and_its_repeats_dropped():
    thinner = ReadingThinner(full_rate=0, window=20)
    # a worker read every other tick: flat, then growing 5 MiB a read (a leak), RSS flat throughout (copy-on-write)
    uss = [(50 * MiB if i < 20 else 50 * MiB + (i - 19) * 5 * MiB) if i % 2 == 0 else None for i in range(60)]
    rows = [_row(i * 0.25, [300 * MiB], [u]) for i, u in enumerate(uss)]
    out = _feed(thinner, rows)
    kept = [r["p"]["100"]["uss"] for r in out if "uss" in r["p"]["100"]]
    growing = [u for i, u in enumerate(uss) if u is not None and i >= 20]
    assert all(u in kept for u in growing)  # every read that moved it by 4 MiB or more
    assert kept.count(50 * MiB) <= 2  # the flat part's repeated reads mostly go
    assert max(kept) == max(u for u in uss if u is not None)


def test_the_readings_before_a_death_are_written_whole_and_first():
    thinner = ReadingThinner(full_rate=0, window=20)
    rows = [_row(i * 0.25, [300 * MiB, 80 * MiB]) for i in range(30)]
    out = []
    for row in rows[:27]:
        out += thinner.add(row)
    before_death = thinner.process_ended()
    assert before_death == rows[20:27]  # the window so far, whole, to write before the `gone` record
    rest = [thinner.add(row) for row in rows[27:]]
    assert sum(rest, []) == [] and thinner.rest() == rows[27:]  # and the rest of that window whole too
