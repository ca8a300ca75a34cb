"""Decisions about work, not about the model: which request takes which cache slot
(`SlotScheduler`, for continuous batching) and which rows run together in one call
(`row_groups`)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


def row_groups(ends: list[int], call_cost: int) -> list[tuple[int, int]]:
    """Split rows `0 .. n-1` into runs `(first, stop)` of neighbours that attend together.

    A run attends over its longest row's keys, so mixing a short row with a long one reads the
    long row's surplus in vain, while each run is one more kernel call. The split minimises
    `call_cost` (a call's overhead, in key positions read) plus rows times longest end per run,
    by dynamic programming over the run boundaries.
    """
    best = [0] + [None] * len(ends)  # best[b]: cheapest cost of rows 0 .. b-1
    first_of = [0] * (len(ends) + 1)
    for stop in range(1, len(ends) + 1):
        longest = 0
        for first in range(stop - 1, -1, -1):
            longest = max(longest, ends[first])
            cost = best[first] + call_cost + (stop - first) * longest
            if best[stop] is None or cost < best[stop]:
                best[stop], first_of[stop] = cost, first
    runs, stop = [], len(ends)
    while stop:
        runs.append((first_of[stop], stop))
        stop = first_of[stop]
    return runs[::-1]


@dataclass
class Request:
    """One prompt on its way through continuous batching."""

    index: int  # the prompt's position in the caller's list
    prompt: tuple[int, ...]
    admitted_at: float = 0.0  # when its prefill started: its latency runs from there
    next_input: int = 0  # the token its next decode step feeds: the prompt's last, then its own

    @property
    def prefix(self) -> tuple[int, ...]:
        """All but the last prompt token: what is prefilled (the last feeds the first step)."""
        return self.prompt[:-1]


class SlotScheduler:
    """Which request holds which of the cache's slots: waiting requests take free slots first
    come, first served; a finished request frees its slot; slots that no waiting request will
    refill leave the batch, so the last requests decode as in `batched_stop`."""

    def __init__(self, requests: list[Request], slots: int):
        self.waiting = deque(requests)
        self.slots: list[Request | None] = [None] * min(slots, len(requests))

    def admit(self, now: float) -> dict[int, Request]:
        """Free slot -> the waiting request that takes it, first come, first served, while
        requests wait."""
        free = [row for row, request in enumerate(self.slots) if request is None]
        entering = {row: self.waiting.popleft() for row in free[:len(self.waiting)]}
        for row, request in entering.items():
            request.admitted_at, request.next_input = now, request.prompt[-1]
            self.slots[row] = request
        return entering

    def has_free_slot(self) -> bool:
        return None in self.slots

    def release(self, row: int) -> None:
        self.slots[row] = None

    def rows_to_keep(self) -> list[int]:
        """The slots still needed: those held, and as many free ones as requests wait. The
        others will never be refilled and may leave the batch (the caller drops them from its
        cache and calls `keep`)."""
        free = [row for row, request in enumerate(self.slots) if request is None]
        surplus = set(free[len(self.waiting):])
        return [row for row in range(len(self.slots)) if row not in surplus]

    def keep(self, rows: list[int]) -> None:
        self.slots = [self.slots[row] for row in rows]
