"""How far a long command has got, on stderr: a bar in a terminal (tqdm's when installed), a
plain line at most every ``every_s`` seconds (and at the end) otherwise, so a log shows it
without the bar's redraws."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class Progress:
    """Items done of ``total`` (episodes, replays, metres, ...): ``update(note)`` counts one
    (``done=n``: ``n`` in all), ``close()`` ends the bar (in a log: the last line)."""

    def __init__(
        self,
        total: int,
        desc: str,
        unit: str,
        *,
        every_s: float = 30.0,
        enabled: bool = True,
        stream: TextIO | None = None,
    ):
        self.total = int(total)
        self.desc = desc
        self.unit = unit
        self.every_s = float(every_s)
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.note = ""
        self._t0 = time.perf_counter()
        self._due = self._t0 + self.every_s
        self._bar: Any = None
        if enabled and getattr(self.stream, "isatty", lambda: False)():
            try:
                from tqdm.auto import tqdm
            except ImportError:
                pass
            else:
                self._bar = tqdm(total=self.total, desc=desc, unit=unit, file=self.stream)

    def update(self, note: str = "", done: int | None = None) -> None:
        """One more item done, or ``done`` items in all (never fewer than before); ``note``
        goes on the line (e.g. the last item's result)."""
        step = 1 if done is None else max(0, int(done) - self.done)
        self.done += step
        self.note = note
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(note, refresh=False)
            self._bar.update(step)
            return
        now = time.perf_counter()
        if now >= self._due and self.done < self.total:
            self._due = now + self.every_s
            self._line(now)

    def close(self) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            return
        self._line(time.perf_counter())

    def _line(self, now: float) -> None:
        elapsed = now - self._t0
        line = f"  {self.desc}: {self.done}/{self.total} {self.unit}s in {elapsed:.0f} s"
        if self.note:
            line += f" (last: {self.note})"
        print(line, file=self.stream, flush=True)
