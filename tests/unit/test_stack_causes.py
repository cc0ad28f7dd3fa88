"""Hang causes read from fake stacks and kernel states."""

from __future__ import annotations

from dlprobe.analysis.measures.stack_causes import classify, main_wait_cause, own_frames

FORK = ["Thread-1 (hold_lock_forever)"]


def py(name: str, code: str = "", user: bool = True, file: str = "/home/u/train.py") -> dict:
    return {"name": name, "file": file, "line": 10, "native": False, "user": user, "code": code}


def native(name: str, lib: str = "/usr/lib/libc.so.6") -> dict:
    return {"name": name, "file": lib, "line": None, "native": True, "user": False}


def worker(frames: list[dict], **state) -> dict:
    loop = py("_worker_loop", user=False, file="/venv/site-packages/torch/utils/data/_utils/worker.py")
    parent = py("<module>", "for batch in loader:")  # inherited from the parent at fork time
    base = {"state": "S", "wchan": "futex_wait_queue", "syscall": "futex", "cpu_share": 0.0, "threads": 3}
    return {**base, **state, "stack": [{"name": "MainThread", "frames": [*frames, loop, parent]}]}


def test_lock_taken_with_a_parent_thread_alive_at_fork_is_fork_lock():
    proc = worker([native("do_futex_wait"), native("PyThread_acquire_lock_timed"), py("misbehave", "with LOCK:")])
    cause = classify(proc, FORK, "fork")
    assert cause.cause == "fork-lock"
    assert "hold_lock_forever" in cause.summary and "spawn" in cause.fix


def test_lock_without_threads_at_fork_or_under_spawn_is_a_plain_lock_wait():
    proc = worker([py("misbehave", "with self.lock:")])
    assert classify(proc, [], "fork").cause == "lock-wait"
    assert classify(proc, FORK, "spawn").cause == "lock-wait"


def test_libgomp_frames_are_openmp_after_fork():
    frames = [native("gomp_team_barrier_wait_end", "/usr/lib/libgomp.so.1"), native("mkl_blas_sgemm_omp_driver_v1")]
    assert classify(worker([*frames, py("__getitem__", "x @ y")]), FORK, "fork").cause == "openmp-fork"


def test_opencv_frames_are_opencv_threads():
    frames = [native("cv::parallel_for_", "/site-packages/cv2/libopencv_core.so"), py("__getitem__", "cv2.resize")]
    assert classify(worker(frames), None, "fork").cause == "opencv-threads"


def test_read_of_a_pipe_socket_or_stuck_storage_is_blocked_read():
    pipe = worker(
        [native("read"), py("load", "f.read()")], wchan="anon_pipe_read", syscall="read", fd_target="pipe:[1]"
    )
    cause = classify(pipe, FORK, "fork")
    assert cause.cause == "blocked-read" and "pipe" in cause.summary and "timeout" in cause.fix
    nfs = worker([py("load", "open(p).read()")], state="D", wchan="rpc_wait_bit_killable", syscall="openat")
    assert "uninterruptible" in classify(nfs, None, "fork").summary


def test_cpu_moving_means_busy_not_blocked():
    proc = worker([py("decode", "while True:")], wchan=None, syscall="running", cpu_share=0.98)
    cause = classify(proc, FORK, "fork")
    assert cause.cause == "busy" and "98%" in cause.summary


def test_sleep_and_unknown():
    assert classify(worker([py("fetch", "time.sleep(30)")], wchan="hrtimer_nanosleep", syscall="clock_nanosleep"),
                    None, "fork").cause == "sleep"  # fmt: skip
    assert classify(worker([py("x")], wchan="do_wait", syscall="wait4"), None, "fork").cause == "unknown"


def test_frames_inherited_from_the_parent_are_not_the_workers():
    proc = worker([py("misbehave")])
    names = [f["name"] for f in own_frames(proc["stack"][0])]
    assert names == ["misbehave", "_worker_loop"]


def test_main_waiting_on_the_queue_is_queue_wait_and_a_stuck_pin_thread_is_named():
    main_frames = [py("select", user=False, file="/lib/python3.11/selectors.py"),
                   py("_try_get_data", user=False, file="/site-packages/torch/utils/data/dataloader.py"),
                   py("<module>", "for batch in loader:")]  # fmt: skip
    main = {"state": "S", "wchan": "poll_schedule_timeout", "syscall": "poll", "cpu_share": 0.0,
            "stack": [{"name": "MainThread", "frames": main_frames}]}  # fmt: skip
    assert main_wait_cause(main).cause == "queue-wait"
    pin = {
        "name": "Thread-2 (_pin_memory_loop)",
        "frames": [native("cudaHostAlloc"), py("pin_memory", user=False), py("_pin_memory_loop", user=False)],
    }
    main["stack"].append(pin)  # fmt: skip
    assert main_wait_cause(main).cause == "pin-thread"


TOKENIZERS_SO = "/venv/lib/python3.11/site-packages/tokenizers/tokenizers.abi3.so"


def test_a_wait_in_a_librarys_native_code_names_the_library_not_unknown():
    # as py-spy --native showed a worker of a fast tokenizer used in the parent with TOKENIZERS_PARALLELISM=true
    frames = [
        native("syscall", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
        native("_RNvMNtNtNtNtCsgHYyB3hU8Ec_3std3sys4sync7condvar5futexNtB2_7Condvar4wait", TOKENIZERS_SO),
        native("_RNvMs3_NtCsjpdOAJTRuNw_10rayon_core5latchNtB5_9LockLatch14wait_and_reset", TOKENIZERS_SO),
        py("__getitem__", "self.tok.encode_batch(texts)"),
    ]
    cause = classify(worker(frames), [], "fork")
    assert cause.cause == "native-wait"
    assert cause.summary.startswith(
        "waiting inside tokenizers' native code (tokenizers.abi3.so: std::sys::sync::"
        "condvar::futex::Condvar::wait <- rayon_core::latch::LockLatch::wait_and_reset)"
    )
    assert "thread pool" in cause.summary and "Keep tokenizers' thread pool out of the parent" in cause.fix
    assert cause.evidence["native_library"] == "tokenizers"
    # a wait in the C library alone names nothing: still unknown, never a guess
    assert classify(worker([native("syscall"), py("__getitem__", "x")]), [], "fork").cause == "unknown"
