"""The continuous-batching scheduler on its own: which request holds which slot, and when
slots leave the batch. (That the whole loop generates what `sequential` does is
tests/test_continuous.py's.)"""

from batched_reasoning.engine.scheduling import Request, SlotScheduler


def requests(n: int) -> list[Request]:
    return [Request(index, (10 + index, 20 + index)) for index in range(n)]


def held(scheduler: SlotScheduler) -> list[int | None]:
    return [None if request is None else request.index for request in scheduler.slots]


def test_waiting_requests_take_free_slots_first_come_first_served():
    scheduler = SlotScheduler(requests(5), slots=3)
    entering = scheduler.admit(now=1.5)
    assert {row: request.index for row, request in entering.items()} == {0: 0, 1: 1, 2: 2}
    assert all(r.admitted_at == 1.5 and r.next_input == r.prompt[-1] for r in entering.values())
    scheduler.release(1)
    assert scheduler.has_free_slot() and held(scheduler) == [0, None, 2]
    assert scheduler.rows_to_keep() == [0, 1, 2]  # two still wait for the one free slot
    assert {row: r.index for row, r in scheduler.admit(now=2.0).items()} == {1: 3}
    assert held(scheduler) == [0, 3, 2] and not scheduler.has_free_slot()


def test_slots_that_no_request_will_refill_leave_the_batch():
    scheduler = SlotScheduler(requests(4), slots=3)
    scheduler.admit(now=0.0)
    scheduler.release(0)
    scheduler.release(2)  # two free slots, one request waiting: one slot stays to take it
    keep = scheduler.rows_to_keep()
    assert keep == [0, 1]
    scheduler.keep(keep)
    assert held(scheduler) == [None, 1]
    assert {row: r.index for row, r in scheduler.admit(now=1.0).items()} == {0: 3}
    scheduler.release(0)
    scheduler.release(1)
    assert scheduler.rows_to_keep() == []  # nothing holds a slot and nothing waits: done
    scheduler.keep([])
    assert scheduler.slots == []


def test_never_more_slots_than_requests():
    assert len(SlotScheduler(requests(2), slots=8).slots) == 2
    assert Request(0, (5, 6, 7)).prefix == (5, 6)
