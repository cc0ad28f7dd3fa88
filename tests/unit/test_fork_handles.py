"""What crosses the fork: descriptors held by objects reachable from a dataset (in_training/fork_handles.py), and the
shared-handle finding on them (analysis/findings/shared_handle.py)."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from dlprobe.analysis.findings.shared_handle import find_shared_handles
from dlprobe.in_training.fork_handles import dataset_handles
from dlprobe.rundir.schema import EV_FORK_HANDLES
from tests.unit.fakes import loader, run


class Holder:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


class Wrapper:  # an object of the user's that holds a handle one level down
    def __init__(self, inner):
        self.inner = inner


def test_file_objects_sockets_and_library_objects_are_found_by_their_descriptor(tmp_path):
    h5py = pytest.importorskip("h5py")
    lmdb = pytest.importorskip("lmdb")
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.zeros(4))
    fobj = open(path, "rb")  # noqa: SIM115
    h5 = h5py.File(fobj, "r")
    env = lmdb.open(str(tmp_path / "db"))
    sock = socket.socket()
    try:
        found = dataset_handles(Holder(h5=h5, meta=Wrapper([env]), sock=sock, labels=np.arange(3), name="x"))
        by_attr: dict[str, set[str]] = {}
        for h in found["handles"]:
            by_attr.setdefault(h["attribute"], set()).add(h["owner"])
        assert by_attr == {"self.h5": {"h5py._hl.files.File"}, "self.meta.inner[0]": {"lmdb.Environment"},
                           "self.sock": {"socket.socket"}}  # fmt: skip
        env_files = {h["target"].rsplit("/", 1)[1] for h in found["handles"] if h["attribute"].endswith("[0]")}
        assert env_files == {"data.mdb", "lock.mdb"}  # the environment's folder names them both
        [h5_handle] = [h for h in found["handles"] if h["attribute"] == "self.h5"]
        assert h5_handle["fd"] == fobj.fileno() and h5_handle["access"] == "r" and h5_handle["kind"] == "file"
        assert found["fds"] >= 4
    finally:
        h5.close(), fobj.close(), env.close(), sock.close()


def test_a_dataset_holding_only_paths_and_arrays_hands_over_nothing(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x" * 10)
    with open(tmp_path / "a.bin", "rb") as unrelated:  # open in the process, held by no object of the dataset
        assert unrelated.fileno() > 2
        assert (
            dataset_handles(Holder(path=str(tmp_path / "a.bin"), rows=np.zeros(5), files=["a", "b"]))["handles"] == []
        )


HANDLE = {"fd": 6, "target": "/data/train.h5", "kind": "file", "pos": 8112, "access": "r", "attribute": "self.h5",
          "owner": "h5py._hl.files.File"}  # fmt: skip


def _run(errors=(), start_method="fork"):
    lo = loader(num_workers=4, start_method=start_method)
    lo.errors = list(errors)
    return run([lo], [], events=[{"ev": EV_FORK_HANDLES, "t": 1.0, "pid": 1, "loader": 0, "epoch": 0, "fds": 9,
                                  "handles": [HANDLE]}])  # fmt: skip


def test_a_handle_shared_with_forked_workers_is_info_until_a_worker_fails_on_it():
    [info] = find_shared_handles(_run())
    assert info.severity == "info" and "`self.h5` (h5py) before its 4 workers forked" in info.title
    assert "`self.h5` (h5py._hl.files.File: /data/train.h5)" in info.detail
    assert "`if self.h5 is None:`" in info.fix and "forkserver" in info.fix
    error = {"type": "OSError", "message": "Caught OSError in DataLoader worker process 2.\nOriginal Traceback ...\n"
             '    return self.h5["x"][i]\nOSError: Can\'t synchronously read data'}  # fmt: skip
    [warning] = find_shared_handles(_run([error]))
    assert warning.severity == "warning" and warning.title.endswith("worker 2 failed with OSError")
    assert warning.evidence["tied_by"] == "its traceback reads `self.h5`"


def test_an_unrelated_main_process_error_or_spawned_workers_do_not_warn():
    main_error = {"type": "ValueError", "message": "bad shape in the training step"}
    assert find_shared_handles(_run([main_error]))[0].severity == "info"
    assert find_shared_handles(_run(start_method="spawn")) == []


def test_attributes_a_proxy_makes_up_are_never_asked_for():
    asked = []

    class Proxy:  # an RPC client: every unknown attribute is a remote call
        def __getattr__(self, name):
            asked.append(name)
            raise AttributeError(name)

    assert dataset_handles(Holder(client=Proxy()))["handles"] == []
    assert asked == []


def test_a_worker_error_whose_index_loads_alone_is_tied_to_the_shared_handle_and_cites_the_check():
    error = {"type": "ValueError", "message": "Caught ValueError in DataLoader worker process 1.\nOriginal Traceback"
             " ...\nValueError: reply for sample 80, asked for 32"}  # fmt: skip
    shared = _run([error])
    assert find_shared_handles(shared)[0].severity == "info"  # nothing in the error names the handle
    shared.events.append({"ev": "sample_check", "loader": 0, "index": 32, "exception": "ValueError",
                          "outcome": "loads"})  # fmt: skip
    [warning] = find_shared_handles(shared)
    assert warning.severity == "warning" and warning.evidence["tied_index"] == 32
    assert warning.evidence["tied_index_alone"] == "loads"
    assert "dataset[32], the index it failed on, loads when dlprobe loads it again alone" in warning.detail


def test_a_library_handle_without_fileno_is_found_beside_the_path_and_a_memmap_by_its_mapping(tmp_path):
    import sqlite3

    db = tmp_path / "rows.db"
    sqlite3.connect(db).close()
    np.save(tmp_path / "arr.npy", np.arange(50_000.0))
    conn = sqlite3.connect(db)  # holds the database's descriptor, with no fileno() nor a file name to ask
    conn.execute("select 1").fetchall()
    try:
        found = dataset_handles(Holder(path=str(db), db=conn, arr=np.load(tmp_path / "arr.npy", mmap_mode="r")))
    finally:
        conn.close()
    [handle] = found["handles"]
    assert (handle["attribute"], handle["owner"], handle["held_by"]) == ("self.db", "sqlite3.Connection", "path")
    [mapped] = [m for m in found["mapped"] if m["path"] == str(tmp_path / "arr.npy")]
    assert mapped["attribute"] == "self.arr" and mapped["owner"] == "numpy.memmap" and not mapped["writable"]
    assert not any(m["path"].endswith(".so") for m in found["mapped"])


def test_a_mapped_file_is_a_suspect_only_where_a_workers_error_names_it():
    mapping = {"path": "/data/tokens.bin", "kib": 4096, "shared": True, "writable": True, "attribute": "self.tokens",
               "owner": "numpy.memmap"}  # fmt: skip
    lo = loader(num_workers=2)
    quiet = run([lo], [], events=[{"ev": EV_FORK_HANDLES, "t": 1.0, "pid": 1, "loader": 0, "epoch": 0, "fds": 9,
                                   "handles": [], "mapped": [mapping]}])  # fmt: skip
    assert find_shared_handles(quiet) == []
    lo.errors = [{"type": "ValueError", "message": "Caught ValueError in DataLoader worker process 1.\nOriginal "
                  "Traceback ...\n    x = self.tokens[i]\nValueError: cannot reshape array"}]  # fmt: skip
    [finding] = find_shared_handles(quiet)
    assert finding.severity == "warning" and finding.evidence["attributes"] == ["self.tokens"]
    assert "memory-mapped /data/tokens.bin" in finding.detail


def test_a_python_object_beside_the_path_is_not_taken_for_the_holder_of_a_descriptor_opened_elsewhere(tmp_path):
    class Resize:  # a transform: a Python object of a library's, callable, holding no descriptor
        size = 32

        def __call__(self, x):
            return x

    (tmp_path / "index.csv").write_text("a,b\n")
    with open(tmp_path / "index.csv") as unrelated:  # the script's own open file, that the dataset names by path
        assert unrelated.fileno() > 2
        found = dataset_handles(Holder(path=str(tmp_path / "index.csv"), transform=Resize()))
    assert found["handles"] == []


class Pool:  # a connection pool's shape: a queue (a deque) of connections, each holding its socket
    def __init__(self, sock):
        import collections

        self.queue = collections.deque([None, None, Holder(sock=sock)])


def test_a_socket_deep_inside_a_session_is_named_by_the_datasets_attribute_with_the_path_to_it():
    left, right = socket.socketpair()
    try:
        # eight levels down, past the first walk's depth: a session's adapters, pools and queued connection
        session = Holder(adapters={"https://": Holder(poolmanager=Holder(pools=Holder(_container={"k": Pool(left)})))})
        found = dataset_handles(Holder(session=session, root="https://example.org"))
        [handle] = found["handles"]
        assert handle["fd"] == left.fileno() and handle["kind"] == "socket"
        assert handle["attribute"] == "self.session" and handle["owner"].endswith("Holder")
        assert handle["via"] == "self.session.adapters['https://'].poolmanager.pools._container['k'].queue[2].sock"
        assert handle["via_owner"] == "socket.socket"
        # sessions kept in a dict: named by the one that holds it, not by the dict
        [in_dict] = dataset_handles(Holder(clients={"eu": Wrapper(session)}))["handles"]
        assert in_dict["attribute"] == "self.clients['eu']" and in_dict["owner"].endswith("Wrapper")
        assert in_dict["via"].startswith("self.clients['eu'].inner.adapters")
        # a session that holds no connection (nothing opened before the fork) hands over nothing
        assert dataset_handles(Holder(session=Holder(adapters={"https://": Pool(None)})))["handles"] == []
    finally:
        left.close(), right.close()


SESSION = {"fd": 7, "target": "socket:[22479]", "kind": "socket", "pos": 0, "access": "rw",
           "attribute": "self.session", "owner": "requests.sessions.Session", "held_by": "fileno",
           "via": "self.session.adapters['https://'].poolmanager.pools._container[PoolKey(...)].pool.queue[9].sock",
           "via_owner": "ssl.SSLSocket"}  # fmt: skip


def test_a_session_shared_across_the_fork_is_named_with_its_tls_socket_and_tied_to_the_workers_tls_error():
    lo = loader(num_workers=4)
    message = ("Caught SSLError in DataLoader worker process 2.\nOriginal urllib3.exceptions.SSLError: "
               "[SSL: DECRYPTION_FAILED_OR_BAD_RECORD_MAC] decryption failed")  # fmt: skip
    lo.errors = [{"type": "SSLError", "message": message}]
    shared = run([lo], [], events=[{"ev": EV_FORK_HANDLES, "t": 1.0, "pid": 1, "loader": 0, "epoch": 0, "fds": 9,
                                    "handles": [SESSION]}])  # fmt: skip
    [finding] = find_shared_handles(shared)
    assert finding.severity == "warning" and "`self.session` (requests)" in finding.title
    assert "`self.session` (requests.sessions.Session: a TLS socket of a pooled connection, at `self.session" in (
        finding.detail
    )
    assert "one record counter" in finding.detail and "os.getpid()" in finding.fix
    assert finding.evidence["tied_by"] == (
        "it is ssl's error for one TLS connection written by several processes (its record numbers replayed)"
    )


def test_a_sample_that_fails_alone_is_not_blamed_when_its_error_comes_of_the_shared_handle():
    from dlprobe.analysis.findings.deaths.sample_checks import blames_the_sample, doubt_shared_handle

    tar = {**HANDLE, "target": "/data/train.tar.gz", "attribute": "self.tar", "owner": "tarfile.TarFile"}
    shared = run([loader(num_workers=4)], [], events=[{"ev": EV_FORK_HANDLES, "t": 1.0, "pid": 1, "loader": 0,
                                                       "epoch": 0, "fds": 9, "handles": [tar]}])  # fmt: skip
    message = ("Caught KeyError in DataLoader worker process 0.\nOriginal Traceback ...\n"
               "    return self.tar.extractfile(self.names[i]).read()\n"
               "KeyError: \"filename '00002.bin' not found\"")  # fmt: skip
    evidence = {"exception": "KeyError", "sample_alone": "fails", "error_alone": "KeyError: ..."}
    doubt_shared_handle(shared, shared.loaders[0], evidence, message)
    assert not blames_the_sample(evidence) and evidence["sample_alone"] == "unverified"
    assert "its traceback reads `self.tar`" in evidence["sample_check_reason"]
    # an error that names neither the handle nor its library, in a dataset that holds one: the sample stays blamed
    plain = {"exception": "ValueError", "sample_alone": "fails", "error_alone": "ValueError: record 250"}
    doubt_shared_handle(shared, shared.loaders[0], plain, "ValueError: record 250 has a negative length")
    assert blames_the_sample(plain)
    # no handle at the fork (opened in each worker): nothing to doubt
    alone = {"exception": "KeyError", "sample_alone": "fails"}
    doubt_shared_handle(run([loader(num_workers=4)], []), loader(num_workers=4), alone, message)
    assert blames_the_sample(alone)
