"""One writer per run dir: a lock file naming its holder, taken atomically on local disks, NFS and Lustre.

``<run>/seafl.lock`` is a small JSON file: ``host``, ``pid``, ``pid_start`` (the process's start
time, so a reused pid is not mistaken for the holder), ``started`` (unix time), a random
``token``, and torchrun's ``run_id`` and ``attempt`` (``TORCHELASTIC_RUN_ID``,
``TORCHELASTIC_RESTART_COUNT``). It is taken by writing a unique temp file in the run dir and
``os.link``-ing it to ``seafl.lock``: link(2) fails if the name exists, atomically, on local file
systems, on every NFS version (``O_CREAT|O_EXCL`` is not atomic on NFSv2 clients) and on Lustre;
an NFS reply lost after a successful link is caught by the temp file's link count. While held, a
daemon thread touches the file every :data:`HEARTBEAT_S` seconds: its modification time is the
heartbeat, read through an open file so NFS's close-to-open consistency shows the fresh value.

A lock is **stale**, and taken over with a line saying so, when
- its holder ran on this host and its process is gone (or the pid is another process now);
- its holder is an earlier attempt of this torchrun job (same run id, lower restart count):
  torchrun stops every worker of an attempt before it starts the next;
- its heartbeat is older than :data:`STALE_S` seconds (120; ``SEAFL_LOCK_STALE_S``): the holder's
  node is gone or frozen. Clocks of the hosts (or NFS server) must agree to well within that.
Otherwise a second run is refused with one line naming the holder (:class:`RunDirBusy`).

    with RunDirLock(run_dir):       # or lock = RunDirLock(run_dir).acquire(); ...; lock.release()
        ...write the run dir...
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

from seafl_dist.report.sinks import writing
from seafl_dist.settings import ConfigError

NAME = "seafl.lock"
HEARTBEAT_S = 10.0
STALE_S = 120.0


class RunDirBusy(ConfigError):
    """Another live run holds the run dir; the CLI prints it as one line and exits 2."""


def stale_after_s() -> float:
    return float(os.environ.get("SEAFL_LOCK_STALE_S", STALE_S))


def _proc_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # fields from the 3rd (state) on; comm may hold spaces


def _pid_start(pid: int) -> int | None:
    fields = _proc_stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None  # field 22: start time since boot


def _alive(pid: int, start: int | None) -> bool:
    """Whether process ``pid`` (of this host) still runs and is the one that started at ``start``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    fields = _proc_stat(pid)
    if fields is not None and fields[0] in ("Z", "X"):  # killed, not yet reaped by its parent
        return False
    return start is None or fields is None or _pid_start(pid) == start


def read(path: Path) -> dict | None:
    """The lock's content with ``heartbeat_age`` (seconds since the holder last touched it); None if absent."""
    try:
        with open(path) as f:
            age = time.time() - os.fstat(f.fileno()).st_mtime
            info = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return {**info, "heartbeat_age": age} if isinstance(info, dict) else None


def stale_reason(info: dict) -> str | None:
    """Why the lock described by ``info`` no longer protects a live run (None: it does)."""
    here = socket.gethostname()
    if info.get("host") == here and not _alive(int(info.get("pid", 0)), info.get("pid_start")):
        return f"process {info.get('pid')} on {here} is gone"
    run_id, attempt = os.environ.get("TORCHELASTIC_RUN_ID"), os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if run_id not in (None, "", "none") and info.get("run_id") == run_id and attempt is not None \
            and info.get("attempt") is not None and int(info["attempt"]) < int(attempt):
        return f"it is attempt {info['attempt']} of this torchrun job, which torchrun restarted (attempt {attempt})"
    if info.get("heartbeat_age", 0.0) > stale_after_s():
        return f"its heartbeat is {info['heartbeat_age']:.0f}s old (limit {stale_after_s():.0f}s)"
    return None


def describe(info: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started", 0)))
    return (f"host {info.get('host')}, pid {info.get('pid')} (started {started}, "
            f"heartbeat {info.get('heartbeat_age', 0.0):.0f}s ago)")


class RunDirLock:
    """The lock of one run dir, held by this process from :meth:`acquire` to :meth:`release`."""

    def __init__(self, run_dir, *, heartbeat_s: float = HEARTBEAT_S):
        self.dir = Path(run_dir)
        self.path = self.dir / NAME
        self.heartbeat_s = heartbeat_s
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _content(self) -> str:
        pid = os.getpid()
        return json.dumps({"host": socket.gethostname(), "pid": pid, "pid_start": _pid_start(pid),
                           "started": time.time(), "token": self.token,
                           "run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
                           "attempt": os.environ.get("TORCHELASTIC_RESTART_COUNT")}) + "\n"

    def _link(self) -> bool:
        """One atomic attempt to create seafl.lock; True if it is ours."""
        tmp = self.dir / f".{NAME}.{socket.gethostname()}.{os.getpid()}.{self.token}"
        try:
            with writing(tmp), open(tmp, "w") as f:
                f.write(self._content())
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        try:
            os.link(tmp, self.path)
            return True
        except FileExistsError:
            return False
        except OSError:  # NFS: the link may have happened with its reply lost
            return os.stat(tmp).st_nlink == 2
        finally:
            tmp.unlink(missing_ok=True)

    def _take_over(self, holder: dict, why: str) -> None:
        """Move a stale lock aside, atomically; if it changed meanwhile (another taker), put it back."""
        aside = self.dir / f".{NAME}.stale.{self.token}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        taken = read(aside)
        if taken is None or taken.get("token") != holder.get("token"):
            try:
                os.link(aside, self.path)
            except FileExistsError:
                pass
        else:
            print(f"seafl: taking over the lock of {self.dir} from {describe(holder)}: {why}", file=sys.stderr)
        aside.unlink(missing_ok=True)

    def acquire(self) -> "RunDirLock":
        """Take the lock or raise :class:`RunDirBusy` naming the live holder."""
        with writing(self.dir):  # e.g. root squashed on NFS: os.access said yes, mkdir says no
            self.dir.mkdir(parents=True, exist_ok=True)
        for _ in range(5):
            if self._link():
                self._thread = threading.Thread(target=self._beat, name="seafl-run-lock", daemon=True)
                self._thread.start()
                return self
            holder = read(self.path)
            if holder is None:  # released (or moved aside by a taker) between our link and our read
                continue
            why = stale_reason(holder)
            if why is None:
                raise busy(self.dir, holder)
            self._take_over(holder, why)
        raise RunDirBusy(f"run dir {self.dir}: could not take its lock {self.path} (other runs keep taking it); "
                         f"make sure only one run uses this dir")

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            info = read(self.path)
            if info is None or info.get("token") != self.token:
                print(f"seafl: warning: the lock of {self.dir} was taken over by "
                      f"{describe(info) if info else 'another run'}; two runs may now write it", file=sys.stderr)
                return
            try:
                os.utime(self.path)
            except OSError:
                pass  # a full disk or a hiccup of the file system: the next beat tries again

    def release(self) -> None:
        """Stop the heartbeat and remove the lock, if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        info = read(self.path)
        if info is not None and info.get("token") == self.token:
            try:
                self.path.unlink(missing_ok=True)
            except OSError:  # a file system gone read-only: the lock stays, stale once this process ends
                pass

    def __enter__(self) -> "RunDirLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def busy(run_dir: Path, holder: dict) -> RunDirBusy:
    return RunDirBusy(f"run dir {run_dir} is in use by another run: {describe(holder)}; wait for it to end or stop "
                      f"it (a lock whose process is gone, or whose heartbeat is older than {stale_after_s():.0f}s, "
                      f"is taken over)")


def check_free(run_dir: Path) -> None:
    """Raise :class:`RunDirBusy` if a live run holds ``run_dir``; reads only (every torchrun rank may call it)."""
    holder = read(Path(run_dir) / NAME)
    if holder is not None and stale_reason(holder) is None:
        raise busy(run_dir, holder)
