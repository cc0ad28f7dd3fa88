"""A stand-in for torch's `DataLoader(..., worker_method="thread")` on a torch that lacks it (all releases so far).

What it fakes, and why: torch's main branch starts each worker as a `threading.Thread` of the training process
(`_ThreadingDataLoaderIter`), feeding it through per-worker `queue.SimpleQueue`s, with a `threading.Event` to stop
it, and the thread's loop publishes a thread-local `WorkerInfo(worker_method="thread")`. The released torch has only
the process version of that iterator, whose worker loop (`_worker_loop`) installs signal handlers, which Python
refuses outside the main thread, so it cannot simply be run in a thread. This module keeps torch's own iterator
logic (`_MultiProcessingDataLoaderIter`: index sending, in-order reordering, `_process_data(data, worker_idx)`,
`_ResumeIteration` for persistent workers) and replaces only what upstream replaces: the workers become threads
with queues and an Event, and the loop each runs is written here after upstream's design (`_thread_worker_loop`
setting up the worker, `_base_worker_loop` calling torch's own fetcher with the batch's `task_id`). It is not
upstream's code. What it does not fake: `get_worker_info()` answers None in these threads (the released torch has
no thread-local worker info), and there is no pinning.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import torch
from torch._utils import ExceptionWrapper
from torch.utils.data import DataLoader
from torch.utils.data import _utils as data_utils
from torch.utils.data.dataloader import _DatasetKind, _MultiProcessingDataLoaderIter

POLL_S = 0.1  # how often a worker thread looks at the stop event while its queue is empty


def _base_worker_loop(dataset_kind, dataset, index_queue, data_queue, done_event, auto_collation, collate_fn,
                      drop_last, init_fn, worker_id):  # fmt: skip
    """One worker's loop, as upstream's shared loop for threads does it: fetch each task with torch's fetcher."""
    init_error = None
    fetcher = None
    try:
        if init_fn is not None:
            init_fn(worker_id)
        fetcher = _DatasetKind.create_fetcher(dataset_kind, dataset, auto_collation, collate_fn, drop_last)
    except Exception:
        init_error = ExceptionWrapper(where=f"in DataLoader worker thread {worker_id}")
    ended = False
    while True:
        try:
            r = index_queue.get(timeout=POLL_S)
        except queue.Empty:  # noqa: S112 - nothing to do yet: ask again
            continue
        if isinstance(r, data_utils.worker._ResumeIteration):  # persistent workers: a new epoch
            data_queue.put((r, None))
            ended = False
            fetcher = _DatasetKind.create_fetcher(dataset_kind, dataset, auto_collation, collate_fn, drop_last)
            continue
        if r is None:  # the iterator is done with this worker
            break
        if done_event.is_set() or ended:
            continue
        task_id, data_index = r
        if init_error is not None:
            data, init_error = init_error, None
        else:
            try:
                data = fetcher.fetch(data_index)
            except StopIteration:
                data = data_utils.worker._IterableDatasetStopIteration(worker_id)
                ended = True
            except Exception:
                data = ExceptionWrapper(where=f"in DataLoader worker thread {worker_id}")
        data_queue.put((task_id, data))
        del data


def _thread_worker_loop(*args: Any) -> None:
    # The OS thread's name, as upstream names it: /proc/PID/task/TID/comm and py-spy show it.
    torch.multiprocessing._set_thread_name("pt_thread_data_worker")
    threading.current_thread().name = f"DataLoader_thread_{args[-1]}"
    _base_worker_loop(*args)


class _ThreadingIter(_MultiProcessingDataLoaderIter):
    """torch's iterator with thread workers: queues, an Event and threads in place of processes."""

    def __init__(self, loader: DataLoader) -> None:
        torch.utils.data.dataloader._BaseDataLoaderIter.__init__(self, loader)
        self._prefetch_factor = loader.prefetch_factor
        self._in_order = loader.in_order
        self._worker_method = "thread"
        self._worker_init_fn = loader.worker_init_fn
        self._worker_result_queue = queue.SimpleQueue()
        self._worker_pids_set = False  # no processes: torch's SIGCHLD bookkeeping has nothing to watch
        self._shutdown = False
        self._workers_done_event = threading.Event()
        self._index_queues = []
        self._workers = []
        for i in range(self._num_workers):
            index_queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
            args = (self._dataset_kind, self._dataset, index_queue, self._worker_result_queue,
                    self._workers_done_event, self._auto_collation, self._collate_fn, self._drop_last,
                    self._worker_init_fn, i)  # fmt: skip
            w = threading.Thread(target=_thread_worker_loop, args=args, daemon=True)
            w.start()
            self._index_queues.append(index_queue)
            self._workers.append(w)
        self._data_queue = self._worker_result_queue
        self._reset(loader, first_iter=True)

    def _try_get_data(self, timeout: float = data_utils.MP_STATUS_CHECK_INTERVAL) -> tuple[bool, Any]:
        try:
            return True, self._data_queue.get(timeout=timeout)
        except queue.Empty:
            return False, None

    def _shutdown_workers(self) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        self._workers_done_event.set()
        for worker_id in range(len(self._workers)):
            if self._persistent_workers or self._workers_status[worker_id]:
                self._mark_worker_as_unavailable(worker_id, shutdown=True)
        for w in self._workers:
            w.join(timeout=data_utils.MP_STATUS_CHECK_INTERVAL)


class ThreadWorkerLoader(DataLoader):
    """DataLoader(..., worker_method="thread") as torch's main branch has it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.worker_method = "thread"

    def _get_iterator(self) -> Any:
        if self.num_workers == 0:
            return super()._get_iterator()
        return _ThreadingIter(self)
