"""Per-client admission for the lab's heavy events (races, uploads): one client cannot hold every slot.

Gradio's `concurrency_limit` bounds how many events of a kind run at once; this bounds how many of those
one client may hold: at most `per_session` per browser tab (session) and `per_ip` per address. An event
over either cap is refused at once with a message, so it frees its queue slot instead of waiting in it.

    gate = Admission(per_session=1, per_ip=1, stale_after=150)
    with gate.enter(client_keys(request)):   # raises Busy when a cap is reached
        ...

A race counts its lanes too: with `lanes_per_ip`, an address holds at most that many lanes at once
(`enter(keys, weight=lanes)`), besides at most `per_ip` runs.

An entry older than `stale_after` seconds (beyond the event time limit) no longer counts, so an event
whose generator is never closed (a client that vanished mid-race) cannot keep its slot for ever.
"""

from __future__ import annotations

import itertools
import threading
import time
from contextlib import contextmanager

from specstream_core.errors import SpecstreamError


class Busy(SpecstreamError):
    """This client already holds as many slots as it may."""


class Admission:
    def __init__(self, per_session: int, per_ip: int, stale_after: float, clock=time.monotonic,
                 lanes_per_ip: int | None = None):
        self.caps = {"session": per_session, "ip": per_ip}
        self.lanes_per_ip = lanes_per_ip  # most lanes (entries' weights) an address holds at once (None: no cap)
        self.stale_after = stale_after
        self.clock = clock
        self._active: dict[tuple[str, str], dict[int, float]] = {}  # (kind, key) -> {ticket: start}
        self._weights: dict[int, int] = {}  # ticket -> its event's lanes
        self._tickets = itertools.count()
        self._lock = threading.Lock()

    def held(self, kind: str, key: str) -> int:
        with self._lock:
            return len(self._live((kind, key)))

    def _live(self, slot: tuple[str, str]) -> dict[int, float]:
        entries = self._active.get(slot, {})
        now = self.clock()
        for ticket in [t for t, start in entries.items() if now - start > self.stale_after]:
            del entries[ticket]
            self._weights.pop(ticket, None)
        if not entries:
            self._active.pop(slot, None)
        return entries

    @contextmanager
    def enter(self, keys: dict[str, str], weight: int = 1):
        """weight: what the event costs the address's lane budget (a race: its lanes)."""
        slots = [(kind, key) for kind, key in keys.items() if key and kind in self.caps]
        with self._lock:
            for kind, key in slots:
                live = self._live((kind, key))
                if len(live) >= self.caps[kind]:
                    raise Busy("you already have a run going in this tab; wait for it to finish"
                               if kind == "session" else
                               "too many runs from your address at the moment; try again in a little while")
                held = sum(self._weights.get(t, 1) for t in live)
                if kind == "ip" and self.lanes_per_ip is not None and held + weight > self.lanes_per_ip:
                    raise Busy(f"too many runs from your address at the moment: {held} lanes are racing and this "
                               f"host allows {self.lanes_per_ip} per address; try again in a little while or race "
                               "fewer lanes")
            ticket, now = next(self._tickets), self.clock()
            self._weights[ticket] = weight
            for slot in slots:
                self._active.setdefault(slot, {})[ticket] = now
        try:
            yield
        finally:
            with self._lock:
                self._weights.pop(ticket, None)
                for slot in slots:
                    entries = self._active.get(slot)
                    if entries is not None:
                        entries.pop(ticket, None)
                        if not entries:
                            del self._active[slot]


def client_keys(request, trust_forwarded: bool = False) -> dict[str, str]:
    """{'session': tab id, 'ip': address} of a gradio Request (empty for direct calls). Behind a reverse
    proxy every request comes from the proxy: trust_forwarded takes the first X-Forwarded-For address."""
    if request is None:
        return {}
    ip = ""
    if trust_forwarded:
        forwarded = (getattr(request, "headers", None) or {}).get("x-forwarded-for", "")
        ip = forwarded.split(",")[0].strip()
    if not ip:
        client = getattr(request, "client", None)
        ip = getattr(client, "host", "") or ""
    return {"session": str(getattr(request, "session_hash", "") or ""), "ip": ip[:64]}
