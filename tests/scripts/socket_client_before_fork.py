"""A dataset that connects to a feature server (a TCP socket to a server thread in this process) in `__init__` and
asks it for one sample per `__getitem__` from 4 forked workers: they share one connection, so one worker reads the
reply meant for another (`ValueError: reply for sample 37, asked for 12`). `per-worker` (argv[1]) connects in each
worker. `unchecked` takes whatever reply comes, from a server that answers two requests at a time: the worker whose
buffered read takes both replies leaves another waiting in recv for a reply that never comes, a hang on the shared
socket."""

import socket
import socketserver
import sys
import threading

import torch
from torch.utils.data import DataLoader, Dataset


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        pending = []
        for line in self.rfile:
            i = int(line)
            pending.append(f"{i} {i * 2.0}\n")
            # `unchecked`: two requests answered in one write, as a pipelining server may: the worker that reads
            # first buffers both replies, and the other waits for its reply forever
            if not UNCHECKED or len(pending) == 2:
                self.wfile.write("".join(pending).encode())
                pending.clear()


class Remote(Dataset):
    def __init__(self, address, per_worker):
        self.address = address
        self.conn = None if per_worker else socket.create_connection(address)
        self.reader = None if per_worker else self.conn.makefile("rb")

    def __len__(self):
        return 401  # odd: in `unchecked`, the last request has no second to be answered with, at the latest

    def __getitem__(self, i):
        if self.conn is None:
            self.conn = socket.create_connection(self.address)
            self.reader = self.conn.makefile("rb")
        self.conn.sendall(f"{i}\n".encode())
        got, value = self.reader.readline().split()
        if int(got) != i and not UNCHECKED:
            raise ValueError(f"reply for sample {int(got)}, asked for {i}")
        return torch.tensor([float(value)])


UNCHECKED = len(sys.argv) > 1 and sys.argv[1] == "unchecked"

if __name__ == "__main__":
    per_worker = len(sys.argv) > 1 and sys.argv[1] == "per-worker"
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    total = sum(len(b) for b in DataLoader(Remote(server.server_address, per_worker), batch_size=16, num_workers=4))
    print(f"samples {total}")
