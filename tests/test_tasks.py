import threading

import pytest

from common.tasks import Behind


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
