"""One client per thread (a metastore connection, a Kafka producer), each closed once at the end.

The cleaner and the vacuum service give every worker thread its own clients: neither the metastore's
Thrift client nor the delivery waits are shared safely between threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class PerThreadClients:
    """Makes each named client once per thread, and remembers them all for :meth:`close_all`."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._clients: list[Any] = []
        self._lock = threading.Lock()

    def factory(self, name: str, make: Callable[[], Any]) -> Callable[[], Any]:
        """A function returning this thread's client ``name``, made by ``make`` on first use."""

        def get() -> Any:
            client = getattr(self._local, name, None)
            if client is None:
                client = make()
                setattr(self._local, name, client)
                with self._lock:
                    self._clients.append(client)
            return client

        return get

    def close_all(self, failed: Callable[[Any, Exception], None]) -> None:
        """Close every client made so far (those with a ``close``); ``failed`` hears of each that fails."""
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            closer = getattr(client, "close", None)
            if closer is not None:
                try:
                    closer()
                except Exception as error:  # best effort: whatever they sent was acknowledged already
                    failed(client, error)
