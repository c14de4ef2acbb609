"""Generate stages (and their :class:`tracks.bake.StageTerrain` with the start tiles baked)
ahead of need, in a worker process, ``python -m tracks.prefetch``: docs/stages.md, "Stages
made ahead". ``RALLY_PREFETCH=0`` in the environment turns prefetching off.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from typing import Any, BinaryIO

import numpy as np

from tracks.bake import START_AHEAD_M, StageTerrain
from tracks.generator import generate_drawn
from tracks.stage import Stage

#: Requests in flight at most (further requests are ignored until answers come back).
MAX_PENDING = 32
#: How long :meth:`Prefetcher.take` waits for a stage the worker was asked for (s).
WAIT_S = 0.05

#: Bytes the answer pipe is asked to hold (Linux; a few pickled stages).
PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031

Key = tuple[int, float, float, bool, int]
_LEN = struct.Struct("<I")


def _key(seed: int, length_m: float, difficulty: float, sectioned: bool, laps: int) -> Key:
    return (int(seed), float(length_m), float(difficulty), bool(sectioned), int(laps))


def _send(f: BinaryIO, obj: Any) -> None:
    b = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_LEN.pack(len(b)))
    f.write(b)
    f.flush()


def _recv(f: BinaryIO) -> Any:
    head = f.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError
    (n,) = _LEN.unpack(head)
    body = f.read(n)
    if len(body) < n:
        raise EOFError
    return pickle.loads(body)


class Prefetcher:
    """Stages generated ahead in a worker process; answers are read by the caller's own
    thread, without blocking, whenever it makes or takes a request."""

    def __init__(self, max_pending: int = MAX_PENDING):
        self.max_pending = int(max_pending)
        self._proc: subprocess.Popen | None = None
        self._fd_in = -1
        self._fd_out = -1
        self._head = bytearray()  # the length prefix of the answer being read
        self._body: np.ndarray | None = None  # that answer's bytes, read up to _got
        self._got = 0
        self._pending: set[Key] = set()
        self._ready: dict[Key, tuple[Stage, StageTerrain]] = {}
        self._lock = threading.Lock()
        off = ("0", "false", "no", "off")
        self.disabled = os.environ.get("RALLY_PREFETCH", "1").strip().lower() in off
        #: stages handed over by the worker / asked for but made in place
        self.hits = 0
        self.misses = 0

    # ------------------------------------------------------------------------ the worker
    def _start(self) -> bool:
        """Start the worker unless it runs (:meth:`request` checked that prefetching is on)."""
        if self._proc is not None:
            return True
        path = os.pathsep.join(p for p in sys.path if p)
        env = dict(os.environ, PYTHONPATH=path, RALLY_PREFETCH="0")
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tracks.prefetch"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                bufsize=0,
            )
        except Exception:
            self.disabled = True
            return False
        self._fd_in = self._proc.stdin.fileno()
        self._fd_out = self._proc.stdout.fileno()
        self._head, self._body = bytearray(), None  # nothing read from this worker yet
        os.set_blocking(self._fd_out, False)
        try:  # room for a few stages in the pipe, so the worker rarely waits for a read
            import fcntl

            fcntl.fcntl(self._fd_out, _F_SETPIPE_SZ, PIPE_BYTES)
        except Exception:
            pass
        return True

    def _fail(self) -> None:
        self.disabled = True
        self._pending.clear()

    def _drain(self, timeout: float = 0.0) -> None:
        """Read whatever answers have arrived (waiting up to ``timeout`` for the first)."""
        if self._proc is None:
            return
        if timeout > 0.0:
            ready, _, _ = select.select([self._fd_out], [], [], timeout)
            if not ready:
                return
        while True:
            try:
                if self._body is None:  # the length of the next answer
                    chunk = os.read(self._fd_out, _LEN.size - len(self._head))
                    if not chunk:
                        raise EOFError  # the worker ended
                    self._head += chunk
                    if len(self._head) < _LEN.size:
                        continue
                    (n,) = _LEN.unpack(self._head)
                    self._head = bytearray()
                    self._body = np.empty(n, np.uint8)  # read into once, never copied
                    self._got = 0
                got = os.readv(self._fd_out, [self._body[self._got :]])
                if not got:
                    raise EOFError
            except BlockingIOError:
                return
            except (OSError, EOFError):
                self._fail()
                return
            self._got += got
            if self._got == len(self._body):
                body, self._body = self._body, None
                key, made = pickle.loads(body)
                self._pending.discard(key)
                if made is not None:
                    self._ready[key] = made

    # ------------------------------------------------------------------------ the API
    @property
    def capacity(self) -> int:
        """Answers kept for a later :meth:`take` (the oldest untaken one goes first). Asking
        for more stages than this ahead of their use only makes stages nobody takes."""
        return 2 * self.max_pending

    def request(
        self,
        seed: int,
        length_m: float,
        difficulty: float,
        sectioned: bool = False,
        prebake: bool | float = True,
        limit: bool = False,
        laps: int = 0,
    ) -> bool:
        """Start making ``generate(seed, length_m, difficulty)`` (a closed loop of ``laps``
        laps if ``laps`` >= 1) and its terrain source
        (:class:`tracks.bake.StageTerrain`, section-labelled or not) unless on their way;
        with ``prebake``, the source comes with its start tiles baked (worth it when the
        worker has time to spare, not when the env waits for the answer; a number: the tiles
        up to that many metres past the start line, instead of ``START_AHEAD_M``). Returns
        whether the stage is ready or on its way; False when the worker is off, has ``max_pending``
        requests in flight or, with ``limit``, holds :attr:`capacity` answers and requests
        (one more would push out an answer nobody took yet)."""
        key = _key(seed, length_m, difficulty, sectioned, laps)
        with self._lock:
            if self.disabled:
                return False
            self._drain()
            if key in self._pending or key in self._ready:
                return True
            if len(self._pending) >= self.max_pending:
                return False
            if limit and len(self._pending) + len(self._ready) >= self.capacity:
                return False
            if not self._start():
                return False
            ahead = START_AHEAD_M if prebake is True else float(prebake or 0.0)
            b = pickle.dumps((key, ahead), protocol=pickle.HIGHEST_PROTOCOL)
            try:
                os.write(self._fd_in, _LEN.pack(len(b)) + b)
            except OSError:
                self._fail()
                return False
            self._pending.add(key)
            while len(self._ready) > self.capacity:  # nobody took these
                self._ready.pop(next(iter(self._ready)))
        return True

    def take(
        self,
        seed: int,
        length_m: float,
        difficulty: float,
        sectioned: bool = False,
        laps: int = 0,
    ) -> tuple[Stage, StageTerrain] | None:
        """(stage, terrain source) if the worker made them (waiting up to ``WAIT_S`` for ones
        on their way), else None."""
        key = _key(seed, length_m, difficulty, sectioned, laps)
        with self._lock:
            self._drain()
            deadline = time.monotonic() + WAIT_S
            while key in self._pending and not self.disabled:
                left = deadline - time.monotonic()
                if left <= 0.0:
                    break
                self._drain(left)
            made = self._ready.pop(key, None)
            if made is not None:
                self.hits += 1
            elif key in self._pending:
                self.misses += 1
        return made

    def shutdown(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
            self._pending.clear()
            self._ready.clear()
        if proc is not None:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except Exception:
                proc.kill()

    def __getstate__(self) -> dict[str, Any]:  # a pickled env takes no worker along
        return {"max_pending": self.max_pending}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["max_pending"])


def _worker(inp: BinaryIO, out: BinaryIO) -> None:
    """The worker's loop: read ((seed, length, difficulty, sectioned, laps), metres past the
    start line to bake the tiles of, 0 for none), answer (key, (stage, source)) or (key, None)
    if the stage cannot be generated."""
    while True:
        try:
            key, ahead_m = _recv(inp)
        except EOFError:
            return
        try:
            stage = generate_drawn(key[0], key[1], key[2], key[4])
            source = StageTerrain(stage, sectioned=key[3])
            if ahead_m > 0.0:
                source.prebake(source.start_tiles(ahead_m=ahead_m))
            made: tuple[Stage, StageTerrain] | None = (stage, source)
        except Exception:
            made = None
        _send(out, (key, made))


#: The process-wide prefetcher the envs share.
PREFETCHER = Prefetcher()
atexit.register(PREFETCHER.shutdown)

if __name__ == "__main__":
    # answers go to the original stdout; anything printed goes to stderr instead
    _out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _worker(sys.stdin.buffer, _out)
