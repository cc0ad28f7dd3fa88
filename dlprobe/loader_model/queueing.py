"""Throughput of n workers that sleep and then queue for a few cores: exact mean value analysis of a closed network."""

from __future__ import annotations


def closed_throughput(most: int, think_s: float, demand_s: float, servers: int) -> list[float]:
    """Samples/s for 1..`most` workers, each spending `think_s` per sample off the CPU (asleep, waiting on a read)
    and `demand_s` on one of `servers` cores (a station where k queued workers are served min(k, servers) at once).

    Exact MVA with a load-dependent station (Reiser and Lavenberg): the curve bends below min(n / (think + demand),
    servers / demand) well before that corner, because workers that wake together queue for the cores. A loader half
    asleep on 2 cores (1.5 ms asleep, 0.56 ms of CPU per sample) reaches 74% of its bound at 6 workers and 99% at 12;
    the corner said 81% of it at 6 and all of it from 8."""
    if demand_s <= 0 or servers < 1:
        return [n / think_s if think_s > 0 else float("inf") for n in range(1, most + 1)]
    # p[k]: the probability that k workers are at the cores (on one or queued), with one worker fewer in the network
    p = [1.0] + [0.0] * most
    out = []
    for n in range(1, most + 1):
        residence = sum(k / min(k, servers) * demand_s * p[k - 1] for k in range(1, n + 1))
        rate = n / (think_s + residence)
        nxt = [0.0] * (most + 1)
        for k in range(1, n + 1):
            nxt[k] = rate * demand_s / min(k, servers) * p[k - 1]
        nxt[0] = max(0.0, 1.0 - sum(nxt[1 : n + 1]))
        p = nxt
        out.append(rate)
    return out
