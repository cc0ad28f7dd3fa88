"""A dataset that opens a `requests.Session` in `__init__`, fetches the list of samples through it (so the session's
pool keeps one open keep-alive connection), then asks for one sample per `__getitem__` from 4 forked workers: every
worker inherits the same pooled socket and the same TLS state, so the second worker to use it replays the first's
record numbers and the server drops the connection (`requests.exceptions.ConnectionError: ('Connection aborted.',
...)` or an SSLError), on whatever index that worker was on. The server is python's http.server over TLS on loopback
(a self-signed certificate made with `openssl` in argv[1]), HTTP/1.1 with keep-alive, in a process of its own.
`per-worker` (argv[2]) opens the session lazily in each worker, keyed by pid: nothing shared."""

import json
import os
import ssl
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests
import torch
from torch.utils.data import DataLoader, Dataset

N = 400


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the pool keeps the connection open for the next request

    def do_GET(self):
        if self.path == "/index":
            body = json.dumps(list(range(N))).encode()
        else:
            i = int(self.path.rsplit("/", 1)[1])
            body = json.dumps({"index": i, "values": [i * 0.5] * 64}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Remote(Dataset):
    def __init__(self, base, cert, per_worker):
        self.base, self.cert, self.per_worker = base, cert, per_worker
        self.session = self.pid = None
        if per_worker:  # the manifest through a session of its own, closed before the workers fork
            with requests.Session() as manifest:
                self.keys = manifest.get(f"{base}/index", verify=cert).json()
        else:
            self.session = requests.Session()
            self.keys = self.session.get(f"{base}/index", verify=cert).json()

    def _session(self):
        if self.per_worker and self.pid != os.getpid():  # one session per process, made where it is used
            self.session, self.pid = requests.Session(), os.getpid()
        return self.session

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        reply = self._session().get(f"{self.base}/sample/{self.keys[i]}", verify=self.cert, timeout=20).json()
        return torch.tensor(reply["values"])


def serve(root):
    """The server in a process of its own (a remote store, as the reports have it): no thread of it in the parent."""
    cert, key = os.path.join(root, "cert.pem"), os.path.join(root, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)  # fmt: skip
    server = subprocess.Popen([sys.executable, __file__, root, "serve"], stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    return server, f"https://127.0.0.1:{port}", cert


def serve_forever(root):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(os.path.join(root, "cert.pem"), os.path.join(root, "key.pem"))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    root, mode = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
    if mode == "serve":
        serve_forever(root)
    server, base, cert = serve(root)
    try:
        loader = DataLoader(Remote(base, cert, mode == "per-worker"), batch_size=8, num_workers=4)
        print(f"samples {sum(len(b) for b in loader)}")
    finally:
        server.kill()
