"""A dataset that connects to a feature server (a TCP socket to a server thread in this process) in `__init__` and
asks it for one sample per `__getitem__` from 4 forked workers: they share one connection, so one worker reads the
reply meant for another (`ValueError: reply for sample 37, asked for 12`). `per-worker` (argv[1]) connects in each
worker."""

import socket
import socketserver
import sys
import threading

import torch
from torch.utils.data import DataLoader, Dataset


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            i = int(line)
            self.wfile.write(f"{i} {i * 2.0}\n".encode())


class Remote(Dataset):
    def __init__(self, address, per_worker):
        self.address = address
        self.conn = None if per_worker else socket.create_connection(address)
        self.reader = None if per_worker else self.conn.makefile("rb")

    def __len__(self):
        return 4000

    def __getitem__(self, i):
        if self.conn is None:
            self.conn = socket.create_connection(self.address)
            self.reader = self.conn.makefile("rb")
        self.conn.sendall(f"{i}\n".encode())
        got, value = self.reader.readline().split()
        if int(got) != i:
            raise ValueError(f"reply for sample {int(got)}, asked for {i}")
        return torch.tensor([float(value)])


if __name__ == "__main__":
    per_worker = len(sys.argv) > 1 and sys.argv[1] == "per-worker"
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    total = sum(len(b) for b in DataLoader(Remote(server.server_address, per_worker), batch_size=16, num_workers=4))
    print(f"samples {total}")
