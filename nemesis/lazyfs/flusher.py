"""Optional background writeback, like the kernel's periodic dirty-page flush."""

from __future__ import annotations

import logging
import threading

from nemesis.lazyfs.kernel import KernelCache
from nemesis.lazyfs.store import Store

log = logging.getLogger(__name__)


class Flusher:
    """Calls store.flush_all() every `interval_ms` until stopped, after pulling in the pages
    the kernel holds when it caches writes."""

    def __init__(self, store: Store, interval_ms: int, kernel: KernelCache | None = None) -> None:
        self.store = store
        self.kernel = kernel
        self.interval = interval_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lazyfs-flusher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if self.kernel is not None:
                    self.kernel.push()
                self.store.flush_all()
            except OSError:
                # a failed writeback keeps the data dirty; the next round retries
                log.exception("background flush failed")
