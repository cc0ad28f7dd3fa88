"""Two "nodes" on one machine: two network namespaces joined by a veth pair, each running its own `dlprobe run --
torchrun --nnodes 2 --node-rank K` with two ranks, gloo between them over the veth. One rank's loader copies its
parent's pages (cow-growth); `dlprobe report DIR0 DIR1` names its node, rank, worker and cause. Root only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, run_dlprobe
from tests.integration.test_job_report import torchrun_command

SUBNET = "10.213.7"  # private to the two namespaces: no other interface sees it


@dataclass
class Node:
    netns: str
    ifname: str
    addr: str


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_nodes() -> Iterator[tuple[Node, Node]]:
    """Two network namespaces joined by a veth pair, each with loopback up; removed afterwards, whatever happens
    (deleting a namespace removes its end of the pair, and the pair with it)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: making network namespaces")
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2's `ip` to make network namespaces")
    tag = uuid.uuid4().hex[:6]
    nodes = (Node(f"dlp-{tag}-0", f"dlp{tag}a", f"{SUBNET}.1"), Node(f"dlp-{tag}-1", f"dlp{tag}b", f"{SUBNET}.2"))
    made: list[str] = []
    try:
        for node in nodes:
            done = _ip("netns", "add", node.netns)
            if done.returncode != 0:
                pytest.skip(f"cannot make a network namespace here: {done.stderr.strip()}")
            made.append(node.netns)
        a, b = nodes
        steps = [
            ("link", "add", a.ifname, "type", "veth", "peer", "name", b.ifname),
            ("link", "set", a.ifname, "netns", a.netns),
            ("link", "set", b.ifname, "netns", b.netns),
        ]
        for node in nodes:
            steps += [
                ("-n", node.netns, "addr", "add", f"{node.addr}/24", "dev", node.ifname),
                ("-n", node.netns, "link", "set", node.ifname, "up"),
                ("-n", node.netns, "link", "set", "lo", "up"),
            ]
        for step in steps:
            done = _ip(*step)
            if done.returncode != 0:
                pytest.skip(f"cannot join the namespaces with a veth pair: ip {' '.join(step)}: {done.stderr.strip()}")
        yield nodes
    finally:
        for name in made:
            _ip("netns", "del", name)


def test_two_nodes_name_the_node_rank_worker_and_cause(tmp_path: Path, two_nodes: tuple[Node, Node]) -> None:
    master = two_nodes[0].addr
    procs = []
    for rank_of_node, node in enumerate(two_nodes):
        torchrun = [*torchrun_command(), "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", str(rank_of_node),
                    "--master-addr", master, "--master-port", "29500",
                    str(SCRIPTS / "ddp_one_rank_leaky.py"), "--leaky-rank", "3"]  # fmt: skip
        command = ["ip", "netns", "exec", node.netns, sys.executable, "-m", "dlprobe", "run", "-q",
                   "--out", str(tmp_path / f"node{rank_of_node}"), "--", *torchrun]  # fmt: skip
        # gloo picks its address by the hostname, which both namespaces share: name the node's own interface
        env = {**os.environ, "COLUMNS": "120", "GLOO_SOCKET_IFNAME": node.ifname}
        procs.append(subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))  # fmt: skip
    try:
        outputs = [p.communicate(timeout=400) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], [err[-3000:] for _, err in outputs]
    assert "rank 3 checksum" in outputs[1][0]  # the ranks ran across the veth: node 1 hosts ranks 2 and 3
    merged = run_dlprobe(["report", str(tmp_path / "node0"), str(tmp_path / "node1"), "--json", "job.json"], tmp_path)
    assert merged.returncode == 0, merged.stderr
    report = __import__("json").loads((tmp_path / "job.json").read_text())
    labels = [r["label"] for r in report["ranks"]]
    assert labels == ["node 0 rank 0", "node 0 rank 1", "node 1 rank 2", "node 1 rank 3"]
    [cow] = [f for f in report["findings"] if f["code"] == "cow-growth"]
    assert cow["evidence"]["rank"] == "node 1 rank 3", cow["title"]  # the one leaky rank, on its node
    assert cow["title"].startswith("Node 1 rank 3: ") and "workers of loader 0" in cow["title"], cow["title"]
    workers = {w["worker_id"] for w in cow["evidence"]["workers"]}  # each worker that copied, by its id
    assert workers and workers <= {0, 1}
    assert "node 1 rank 3" in merged.stdout
