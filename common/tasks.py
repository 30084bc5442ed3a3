"""Units of work (a day to load, a day's features, a day to scan) run one after another in this process, side by
side in processes of this machine (`Local`), or as tasks on a Dask cluster: the field's engine for Python work past
one machine. A task whose worker dies is run again by the scheduler on another; every wait for one is bounded. Within
a unit, `Behind` runs a piece of work (a file to write) in a thread of its own while the next piece is made, or in
helper processes where the piece holds Python's lock (ruptures' search)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, TypeVar

from common.errors import RcalabError

T = TypeVar("T")
R = TypeVar("R")

TASK_SECONDS = 1800.0  # a day's task takes seconds to a few minutes here; past this it is stuck
TASK_MEMORY = 3 * 2**30  # the most a task's DuckDB holds: with its Python's batches, a step within 4 GB


class Behind:
    """Work done one piece at a time in a thread of its own while the caller makes the next piece (for work that lets
    go of Python's lock: writing a file, a query): `put` waits for the piece before, keeping its result in `results`
    or raising its error, and starts this one; leaving the block waits for the last. At most one piece waits. With
    `inline`, each piece runs at once in the caller's thread (a task kept to one thread). With `processes`, pieces
    run in this process's `helpers`, that many at once (and as many wait): for work that holds Python's lock
    (ruptures' search), which in threads runs on one core at a time and holds up the caller's queries (DuckDB's
    client takes the lock as a query runs); a piece's function and arguments are sent there, and every wait for one
    is bounded. A daemonic process (a Dask worker's) may start none: its pieces run in a thread."""

    def __init__(self, inline: bool = False, processes: int = 0):
        self.results: list = []
        if multiprocessing.current_process().daemon:  # it may start no processes
            processes = 0
        self._pool: Executor | None = None if inline else helpers(processes) if processes else ThreadPoolExecutor(1)
        self._at_once = max(1, processes)
        self._pending: list[Future] = []

    def put(self, fn: Callable[..., R], *args) -> None:
        while len(self._pending) >= self._at_once:
            self._next()
        if self._pool is None:
            self.results.append(fn(*args))
        else:
            self._pending.append(self._pool.submit(fn, *args))

    def wait(self) -> None:
        while self._pending:
            self._next()

    def _next(self) -> None:
        try:
            self.results.append(self._pending.pop(0).result(timeout=TASK_SECONDS))
        except TimeoutError:
            raise RcalabError(f"a piece of work did not finish in {TASK_SECONDS:.0f} s") from None
        except BrokenProcessPool:
            _helpers.clear()  # the next piece starts them again
            raise RcalabError("a helper process died before its piece of work was done") from None

    def __enter__(self) -> "Behind":
        return self

    def __exit__(self, kind, *_) -> None:
        try:
            if kind is None:
                self.wait()
        finally:
            if isinstance(self._pool, ThreadPoolExecutor):
                self._pool.shutdown(wait=True, cancel_futures=True)


_helpers: dict[int, ProcessPoolExecutor] = {}  # by their count


def helpers(processes: int) -> ProcessPoolExecutor:
    """This process's `processes` helper processes: started at the first piece sent to them (spawned, not forked:
    DuckDB's threads do not survive a fork) and kept for the next pieces, as each takes a second to start. A Ctrl-C
    is this process's to handle: they ignore it, and end with it."""
    if processes not in _helpers:
        _helpers[processes] = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=signal.signal, initargs=(signal.SIGINT, signal.SIG_IGN))
    return _helpers[processes]


def task_parts(amount: int, per: int, most: int) -> int:
    """How many tasks share work of `amount` (bytes, series) given about `per` a task: a power of two, at least one
    and at most `most`, so that the tasks share out evenly among workers of any power-of-two count (a day of 10,000
    pods loaded in three parts on two workers left one of them idle for a third of the load)."""
    needed = max(1, -(-amount // per))
    return min(most, 1 << (needed - 1).bit_length())


def _worker():
    """The Dask worker running this task, None outside one. A worker has imported Dask's distributed; a process that
    has not is none, and does not import it to ask (half a second, in the etl's process and each of its tasks')."""
    distributed = sys.modules.get("distributed")
    try:
        return distributed.get_worker() if distributed else None
    except ValueError:
        return None


def worker_threads() -> int | None:
    """The threads of the Dask worker or `Local` process running this task, None outside one: what the task's DuckDB
    may use (by default it takes every core, and a machine's workers would each take them all)."""
    worker = _worker()
    return worker.state.nthreads if worker else _share[0]


def task_memory() -> int:
    """The bytes a task's DuckDB may hold before it spills to disk: `TASK_MEMORY`, or less where that is more than its
    share. In a Dask worker, three quarters of the worker's memory limit shared among its threads (the rest for the
    tasks' Pythons), as each thread runs a task: a task given more holds it (the features of a day of 10,000 pods as
    one task held 5.8 GB given 18, 4.3 GB given `TASK_MEMORY`, by hand). `Local`'s processes side by side share
    `TASK_MEMORY` with their Pythons, each of which holds its batches and libraries: of one share more than the
    processes (a constant fitted to keep a step within 4 GB here: the features of a day of 10,000 pods, in two
    processes of 1 GiB each, held at most 0.4 GB in this process and 1.7 GB in each of them). DuckDB's own default is
    80 % of the machine's memory, which a day of 10,000 pods took (12 GB to sort its anomaly table) and a machine's
    workers would each take."""
    worker = _worker()
    limit = worker.memory_manager.memory_limit if worker else None
    if limit:
        return min(TASK_MEMORY, int(0.75 * limit / worker.state.nthreads))
    return TASK_MEMORY if _share[0] is None else TASK_MEMORY // (_share[1] + 1)


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Local:
    """A client of `run_tasks` that runs several tasks side by side in processes of this machine (spawned: DuckDB's
    threads do not survive a fork), as many as there are cores or tasks, each with its share of the cores; a single
    task runs in this process with all of them. Much of a task runs on one core at a time (Python between queries,
    frames handed to DuckDB, operators of one thread), so tasks side by side keep the cores busier than each task in
    turn with every core: a day of 10,000 pods (its load in four tasks, its features in eight) took 98 s and 188 s of
    CPU in two processes of one thread each, 117 s and 216 s in one process of two threads (two runs each, in turns,
    by hand, each process's DuckDB holding 1.5 GiB; at `task_memory`'s 1 GiB, one run took 102 s)."""


_share = (None, 1)  # in a process of `Local`: its threads, and how many such processes share the machine


def _side_by_side(threads: int, processes: int) -> None:
    global _share
    _share = (threads, processes)


THREAD_POOLS = ("POLARS_MAX_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@contextmanager
def _pools_of(threads: int):
    """The environment of processes started within: their libraries' thread pools of `threads` (read as each
    library loads, before a process's first task)."""
    before = {name: os.environ.get(name) for name in THREAD_POOLS}
    os.environ.update({name: str(threads) for name in THREAD_POOLS})
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value


def _local(fn: Callable[[T], R], items: list[T], timeout: float) -> Iterator[tuple[int, R]]:
    processes = min(cores(), len(items))
    threads = max(1, cores() // processes)
    pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_side_by_side, initargs=(threads, processes))
    ended = False
    try:
        with _pools_of(threads):  # the pool starts a process as a task is sent
            futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
        for future in as_completed(futures, timeout=timeout * len(items)):
            yield futures[future], future.result()
        ended = True
    except TimeoutError:
        raise RcalabError(f"{len(items)} tasks did not finish in {timeout * len(items):.0f} s") from None
    except BrokenProcessPool:
        raise RcalabError("a task's process died before its task was done") from None
    finally:
        if not ended:  # a task still running is not waited for (Python 3.14 has the pool's kill_workers)
            for process in (pool._processes or {}).values():
                process.kill()
        pool.shutdown(wait=ended, cancel_futures=True)


def local_cluster(workers: int):
    """A Dask cluster of `workers` processes on this machine, one thread each. Each worker's libraries keep to its
    thread: Dask sets OpenMP's and BLAS's pools to one; polars' pool takes every core unless told
    (POLARS_MAX_THREADS, set before the worker starts), and DuckDB's is set per task (`worker_threads`)."""
    import dask
    from distributed import LocalCluster

    with dask.config.set({"distributed.nanny.pre-spawn-environ.POLARS_MAX_THREADS": "1"}):
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0")


def run_tasks(fn: Callable[[T], R], items: Iterable[T], client=None, timeout: float = TASK_SECONDS
              ) -> Iterator[tuple[int, R]]:
    """(index, result) of `fn` on each item as each ends: in order in this process (`client` None, or `Local` with
    one task or one core), or in the order they end in processes of `Local` or on the cluster of `client` (a
    `distributed.Client`), past `timeout` seconds a task an error."""
    items = list(items)
    if isinstance(client, Local) and len(items) > 1 and cores() > 1:
        yield from _local(fn, items, timeout)
        return
    if client is None or isinstance(client, Local):
        for i, item in enumerate(items):
            yield i, fn(item)
        return
    from distributed import as_completed

    futures = {client.submit(fn, item, pure=False, retries=1): i for i, item in enumerate(items)}
    try:
        for future in as_completed(futures, timeout=timeout * max(1, len(items))):
            yield futures[future], future.result()
    except TimeoutError:
        raise RcalabError(f"the cluster did not finish {len(items)} tasks in {timeout * len(items):.0f} s") from None
    finally:
        for future in futures:
            future.cancel()


@contextmanager
def cluster(workers: int | None, scheduler: str | None):
    """A Dask client: of a running cluster (`scheduler`), or of a local one of `workers` processes; None (work in
    this process) when neither is given."""
    if not (workers or scheduler):
        yield None
        return
    try:
        from distributed import Client
    except ImportError:
        raise RcalabError("a cluster needs Dask's distributed: pip install 'rcalab[cluster]'") from None
    if scheduler:
        try:
            client = Client(scheduler, timeout="30s")
        except (OSError, TimeoutError) as e:
            raise RcalabError(f"no Dask scheduler answers at {scheduler} ({e})") from None
        with client:
            yield client
        return
    with local_cluster(workers) as local, Client(local, timeout="30s") as client:
        yield client
