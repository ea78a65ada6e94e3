"""Scraping the bench nodes' ``/metrics`` every second while a trial runs (``--http``), as
a Prometheus server would (every 15-60 s usually: once a second is the costly end)."""

from __future__ import annotations

import threading
import urllib.request

from easyjob.threads import NamedThread

__all__ = ["Scraper"]


class Scraper:
    """GETs each URL every *interval* seconds on a thread of its own until :meth:`stop`."""

    def __init__(self, urls: list[str], interval: float = 1.0) -> None:
        self._urls = urls
        self._interval = interval
        self._stop = threading.Event()
        self._thread = NamedThread("bench-scrape", self._loop)
        self.scrapes = 0
        self.failures = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            for url in self._urls:
                try:
                    with urllib.request.urlopen(url, timeout=5) as response:
                        response.read()
                    self.scrapes += 1
                except OSError:
                    self.failures += 1
