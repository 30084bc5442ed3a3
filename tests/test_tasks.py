import multiprocessing
import os
import threading
import time

import pytest

from common.errors import RcalabError
from common.tasks import TASK_MEMORY, Behind, Local, cores, run_tasks, task_memory, task_parts, worker_threads


@pytest.mark.parametrize("inline", [False, True])
def test_behind_keeps_results_in_order_and_runs_in_a_thread_unless_inline(inline):
    threads = []

    def piece(i):
        threads.append(threading.current_thread())
        return i * i

    with Behind(inline=inline) as behind:
        for i in range(4):
            behind.put(piece, i)
    assert behind.results == [0, 1, 4, 9]
    assert (set(threads) == {threading.current_thread()}) == inline


def test_behind_raises_a_pieces_error_at_the_next_put_and_starts_nothing_after_it():
    ran = []

    def piece(i):
        ran.append(i)
        if i == 1:
            raise ValueError("piece 1")

    with pytest.raises(ValueError, match="piece 1"):
        with Behind() as behind:
            for i in range(4):
                behind.put(piece, i)
    assert ran == [0, 1]


def test_work_splits_into_a_power_of_two_of_tasks_that_share_out_evenly_among_workers():
    """Three parts on two workers leave one idle for a third of the work; four keep both busy."""
    assert [task_parts(amount, 10, 8) for amount in (0, 10, 11, 25, 31, 41, 1000)] == [1, 1, 2, 4, 4, 8, 8]


def test_behind_runs_pieces_in_helper_processes_that_outlive_it_and_a_dead_one_is_an_error_not_a_hang():
    """Work that holds Python's lock (ruptures' search) runs beside the caller in processes of its own, as many pieces
    at once as there are helpers, its results in order; a helper that dies fails the piece, and the next pieces get
    new helpers."""
    with Behind(processes=2) as behind:
        for i in range(5):
            behind.put(pow, i, 2)
        behind.put(os.getpid)
    assert behind.results[:5] == [0, 1, 4, 9, 16] and behind.results[5] != os.getpid()

    with pytest.raises(RcalabError, match="helper process died"):
        with Behind(processes=2) as behind:
            behind.put(os._exit, 1)
    with Behind(processes=2) as behind:
        behind.put(pow, 3, 2)
    assert behind.results == [9]


def _in_a_daemon(results):
    with Behind(processes=2) as behind:
        behind.put(pow, 2, 5)
    results.put(behind.results)


def test_behind_in_a_daemonic_process_a_dask_worker_s_runs_its_pieces_in_a_thread():
    """A daemonic process may not start processes (Dask's workers are daemonic): asked for helpers, it gets a thread."""
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    worker = spawn.Process(target=_in_a_daemon, args=(results,), daemon=True)
    worker.start()
    assert results.get(timeout=60) == [32]
    worker.join(timeout=60)


def _share(_):
    return os.getpid(), worker_threads(), task_memory(), os.environ.get("POLARS_MAX_THREADS")


two_cores = pytest.mark.skipif(cores() < 2, reason="tasks side by side need two cores")


@two_cores
def test_local_runs_several_tasks_side_by_side_in_processes_each_with_its_share_of_the_machine():
    """A process a core (or a task), each task's DuckDB and polars given the process's share of the cores and of
    `TASK_MEMORY`; a single task runs here, with all of them."""
    got = dict(run_tasks(_share, range(4), Local()))
    processes = min(cores(), 4)
    threads = max(1, cores() // processes)
    assert sorted(got) == [0, 1, 2, 3] and os.getpid() not in {pid for pid, *_ in got.values()}
    assert {tuple(share) for _, *share in got.values()} == {(threads, TASK_MEMORY // (processes + 1), str(threads))}
    assert list(run_tasks(_share, ["one"], Local())) == [(0, _share(None))]


@two_cores
@pytest.mark.parametrize("fn, args, error", [(time.sleep, [60, 60], "did not finish"),
                                             (os._exit, [0, 1], "process died")])
def test_a_local_task_past_its_time_or_whose_process_died_is_an_error_and_nothing_is_waited_for(fn, args, error):
    started = time.monotonic()
    with pytest.raises(RcalabError, match=error):
        list(run_tasks(fn, args, Local(), timeout=2))
    assert time.monotonic() - started < 30
