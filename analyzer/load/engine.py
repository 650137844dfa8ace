"""Where per-rank and per-partition work runs: the built-in process pool, or a Dask distributed cluster.

Both engines map a picklable function over items and return the results in the items' order, so the report does
not depend on which one ran (docs/scale.md). The pool forks local worker processes; Dask (the optional
``dask`` extra) runs the same functions as tasks on a ``LocalCluster`` it starts, or on an existing cluster
whose workers read the traces by path from storage they share with the caller.
"""
from __future__ import annotations

import operator
import os
import pickle
import shutil
import sys
import tempfile
import weakref
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Optional, Protocol, Sequence

#: Environment variable naming an existing Dask scheduler (used when no --dask / dask= is given).
SCHEDULER_ENV = "ANALYZE_DASK_SCHEDULER"

Progress = Optional[Callable[[int, int, Any], None]]
#: applied in the caller's process to each result as it arrives (e.g. to share equal strings between ranks)
Receive = Optional[Callable[[Any], Any]]


class Engine(Protocol):
    """Maps functions over items somewhere; results come back in order."""

    name: str
    workers: int

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], progress: Progress = None) -> list: ...

    def map_keep(self, fn: Callable[[Any], tuple[Any, Any]], items: Sequence[Any],
                 progress: Progress = None, receive: Receive = None, ship: bool = False) -> tuple[list, list]:
        """``fn(item)`` returns (compact, side): the compacts come back (through ``receive`` as each arrives);
        each side stays where it was made and is named by the handle returned for it (for :meth:`query`).
        ``ship``: the items are data (tables), not file paths: sent to the workers as data, not in the tasks."""
        ...

    def query(self, fn: Callable[[Any, Any], Any], handles: Sequence[Any], args: Sequence[Any]) -> list:
        """``fn(side, arg)`` for each kept side (by handle) and its argument, run where the side is."""
        ...

    def close(self) -> None: ...


class EngineClosed(RuntimeError):
    """Results kept by an engine (interval sets, member partitions) were asked for after it was closed."""


CLOSED = ("the engine that kept this analysis' per-rank sets and member partitions is closed "
          "(Analysis.close(), or the end of its `with` block): read figures, timelines and the member table "
          "before closing it")


def _keep_local(task: tuple) -> tuple[Any, Optional[str]]:
    """Pool worker: run ``fn`` and leave its side result in the scratch folder; the compact part travels back."""
    fn, item, folder = task
    compact, side = fn(item)
    if side is None:
        return compact, None
    fd, path = tempfile.mkstemp(dir=folder, suffix=".pkl")
    with os.fdopen(fd, "wb") as fh:
        pickle.dump(side, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return compact, path


def _query_local(task: tuple) -> Any:
    fn, path, arg = task
    if path is None:
        return fn(None, arg)
    with open(path, "rb") as fh:
        side = pickle.load(fh)
    return fn(side, arg)


#: Inflated input bytes each worker process must have to pay for itself: forking it, feeding it and bringing its
#: results back cost about what parsing this much costs in this process (benchmarks/pool_choice.py). Below two
#: workers' worth there is no pool at all; above, one worker per this many bytes, up to --jobs.
#: ``ANALYZE_POOL_BYTES`` overrides it (0: always the pool of --jobs; for benchmarks).
POOL_BYTES_PER_WORKER = 24 << 20


def _bytes_per_worker() -> int:
    try:
        return max(0, int(os.environ.get("ANALYZE_POOL_BYTES", "")))
    except ValueError:
        return POOL_BYTES_PER_WORKER


def _file_bytes(path: Any) -> Optional[int]:
    """The bytes parsing ``path`` reads: a gzip file's inflated size (from its trailer: exact for one member
    under 4 GiB, a lower bound otherwise), else the file's size; None when it is not a readable file."""
    try:
        size = os.stat(path).st_size
        if size >= 18:
            with open(path, "rb") as fh:
                if fh.read(2) == b"\x1f\x8b":
                    fh.seek(-4, os.SEEK_END)
                    return max(size, int.from_bytes(fh.read(4), "little"))
        return size
    except (OSError, TypeError, ValueError):
        return None


def _item_bytes(item: Any) -> Optional[int]:
    """How much one task reads: a path; a map_keep task (fn, path, scratch folder); a query (fn, kept pickle,
    arg). None when it is data or unknown (then the pool is sized as before, by the items)."""
    if isinstance(item, (str, os.PathLike)):
        return _file_bytes(item)
    if isinstance(item, tuple) and len(item) == 3 and (item[0] is None or callable(item[0])):
        inner = item[1]
        if inner is None:
            return 0
        if isinstance(inner, (str, os.PathLike)):
            return _file_bytes(inner)
    return None


def pool_workers(items: Sequence[Any], workers: int, per_worker: Optional[int] = None) -> int:
    """How many worker processes ``items`` pay for (1: run them in this process): one per ``per_worker`` bytes
    they read, at most ``workers`` and one per item; the items' count when their size is unknown."""
    workers = max(1, min(int(workers), len(items)))
    per = _bytes_per_worker() if per_worker is None else per_worker
    if workers <= 1 or per <= 0:
        return workers
    total = 0
    for it in items:
        n = _item_bytes(it)
        if n is None:
            return workers
        total += n
    return max(1, min(workers, total // per))


class _sigint_held:
    """Hold Ctrl-C while worker processes start. The forking thread blocks SIGINT, so a child forked or spawned
    meanwhile inherits the block and never runs Python's handler (no KeyboardInterrupt traceback per worker);
    in the main thread a Ctrl-C meanwhile is only noted (another thread may take the signal) and raised as
    KeyboardInterrupt when the block ends, once the processes exist and can be stopped. No-op parts where
    signal masks or handlers are not available."""

    def __enter__(self) -> "_sigint_held":
        import signal
        import threading
        self._old = self._handler = None
        self.pressed = False
        if threading.current_thread() is threading.main_thread():
            def note(signum: int, frame: Any) -> None:
                self.pressed = True
            self._handler = signal.signal(signal.SIGINT, note)
        if hasattr(signal, "pthread_sigmask"):
            self._old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        return self

    def __exit__(self, *exc: Any) -> None:
        import signal
        if self._old is not None and signal.SIGINT not in self._old:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        if self._handler is not None:
            signal.signal(signal.SIGINT, self._handler)
            if self.pressed and exc[0] is None:
                if self._handler is signal.default_int_handler:
                    raise KeyboardInterrupt
                if callable(self._handler):  # a library caller's own handler gets the Ctrl-C it missed
                    self._handler(signal.SIGINT, None)


def _quiet_worker() -> None:
    """Pool worker start: ignore Ctrl-C (the parent stops the pool and says so, once) and let it through again."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """End a pool at once: the workers terminated (they ignore Ctrl-C) and reaped; the pool's manager thread then
    finds them gone, fails the pending tasks and ends (cancelling them here too would race it)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        try:
            p.terminate()
        except (OSError, ValueError, AttributeError):
            pass
    for p in procs:
        try:
            p.join(timeout=5)
        except (OSError, ValueError, AttributeError, AssertionError):
            pass
    pool.shutdown(wait=True)


class LocalEngine:
    """Forked worker processes on this machine (serial in this process with one worker or one item)."""

    name = "pool"

    def __init__(self, workers: int = 1):
        self.workers = max(1, int(workers))

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], progress: Progress = None,
            receive: Receive = None) -> list:
        items = list(items)
        out: list = []
        take = receive or (lambda r: r)
        n_workers = pool_workers(items, self.workers)
        if n_workers <= 1:
            for i, it in enumerate(items):
                out.append(take(fn(it)))
                if progress:
                    progress(i + 1, len(items), it)
            return out
        ctx = None
        if sys.platform != "win32":
            import multiprocessing as mp
            ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
        pool = ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx,
                                   initializer=_quiet_worker)
        try:
            with _sigint_held():  # the workers are forked here: none may see a Ctrl-C before it ignores it
                futures = [pool.submit(fn, it) for it in items]  # (not pool.map: its clean-up cancels them, and
            for i, fut in enumerate(futures):                    # Python 3.11's pool then fails on a Ctrl-C)
                out.append(take(fut.result()))
                futures[i] = None  # its result is not kept twice
                if progress:
                    progress(i + 1, len(items), items[i])
        except BaseException:  # Ctrl-C (or an error): stop the workers now instead of letting them finish
            _stop_pool(pool)
            raise
        pool.shutdown(wait=True)
        return out

    def _scratch(self) -> str:
        """This engine's scratch folder (sides of map_keep), removed on close or when the engine is dropped."""
        if getattr(self, "_folder", None) is None:
            self._folder = tempfile.mkdtemp(prefix="analyze-ranks-")
            self._finalizer = weakref.finalize(self, shutil.rmtree, self._folder, True)
        return self._folder

    def map_keep(self, fn: Callable[[Any], tuple[Any, Any]], items: Sequence[Any],
                 progress: Progress = None, receive: Receive = None, ship: bool = False) -> tuple[list, list]:
        folder = self._scratch()
        res = self.map(_keep_local, [(fn, it, folder) for it in items],
                       (lambda i, n, t: progress(i, n, t[1])) if progress else None,
                       (lambda r: (receive(r[0]), r[1])) if receive else None)
        return [r[0] for r in res], [r[1] for r in res]

    def query(self, fn: Callable[[Any, Any], Any], handles: Sequence[Any], args: Sequence[Any]) -> list:
        if any(h is not None and not os.path.exists(h) for h in handles):
            raise EngineClosed(CLOSED)
        tasks = [(fn, h, a) for h, a in zip(handles, args)]
        if len(tasks) < 8:  # reading a few pickles costs less than starting workers
            return [_query_local(t) for t in tasks]
        return self.map(_query_local, tasks)  # sized by the kept pickles' bytes (pool_workers)

    def close(self) -> None:
        fin = getattr(self, "_finalizer", None)
        if fin is not None:
            fin()
        self._folder = None


class DaskUnavailable(RuntimeError):
    """--dask was asked for but the `distributed` package is not installed."""


class DaskEngine:
    """Tasks on a Dask distributed cluster: a LocalCluster of ``workers`` processes (``address="local"``) or the
    scheduler at ``address`` (tcp://host:8786, tls://..., or a scheduler file path ending in .json)."""

    name = "dask"

    def __init__(self, address: str = "local", workers: int = 1):
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:  # the optional extra is missing
            raise DaskUnavailable("--dask needs the optional Dask extra: pip install 'dtrace-analyzer[dask]' "
                                  "(or pip install distributed)") from exc
        self.address = address
        self._cluster = None
        if address == "local":
            # the cluster's processes start with Ctrl-C held (inherited: they never see it, this process stops
            # them); one pressed meanwhile arrives when the cluster is up, and closing it then is quiet
            if sys.platform != "win32":  # started later, from the cluster's thread, it would let Ctrl-C through
                from multiprocessing import resource_tracker  # there again (it unblocks SIGINT after its start)
                resource_tracker.ensure_running()
            self.client = None
            import warnings
            try:
                with _sigint_held(), warnings.catch_warnings():
                    # the scheduler's HTTP server takes another port when 8787 is taken (another cluster, another
                    # run): harmless here (no dashboard is asked for), so not worth a warning on every run's stderr
                    warnings.filterwarnings("ignore", message=r"Port \d+ is already in use", category=UserWarning)
                    self._cluster = LocalCluster(n_workers=max(1, int(workers)), threads_per_worker=1,
                                                 processes=True, dashboard_address=None, silence_logs=40)
                    self.client = Client(self._cluster, set_as_default=False)
            except BaseException:  # Ctrl-C while it started: stop what was started, then stop
                _close_dask(self.client, self._cluster)
                raise
        elif address.endswith(".json") and os.path.exists(address):
            self.client = Client(scheduler_file=address, set_as_default=False)
        else:
            self.client = Client(address, set_as_default=False)
        self.workers = max(1, len(self.client.scheduler_info().get("workers", {})) or int(workers))
        #: what happened on the cluster that the report should say (a lost worker's results rebuilt)
        self.notes: list[str] = []
        self._finalizer = weakref.finalize(self, _close_dask, self.client, self._cluster)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], progress: Progress = None,
            receive: Receive = None) -> list:
        items = list(items)
        if not items:
            return []
        return self._collect(self.client.map(fn, items, pure=False), items, progress, receive)

    def map_keep(self, fn: Callable[[Any], tuple[Any, Any]], items: Sequence[Any],
                 progress: Progress = None, receive: Receive = None, ship: bool = False) -> tuple[list, list]:
        items = list(items)
        if not items:
            return [], []
        # how to make each side again if its worker is lost: the task and its input (a path as it is; shipped
        # data as a pickle in this process' scratch folder, on disk, so the parent's memory does not hold it)
        recipes = [(fn, self._stash(it), True) if ship else (fn, it, False) for it in items]
        sent = self.client.scatter(items) if ship else items  # data goes to the workers, not into the graph
        both = self.client.map(fn, sent, pure=False)
        del sent
        compact = self.client.map(operator.itemgetter(0), both, pure=False)
        sides = self.client.map(operator.itemgetter(1), both, pure=False)  # stay on the workers
        del both  # the cluster drops each (compact, side) pair once both halves are split off
        return self._collect(compact, items, progress, receive), [Kept(f, r) for f, r in zip(sides, recipes)]

    def _stash(self, item: Any) -> str:
        """Pickle ``item`` into this engine's scratch folder (removed on close); its path."""
        if getattr(self, "_folder", None) is None:
            self._folder = tempfile.mkdtemp(prefix="analyze-rebuild-")
            self._scratch_fin = weakref.finalize(self, shutil.rmtree, self._folder, True)
        fd, path = tempfile.mkstemp(dir=self._folder, suffix=".pkl")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(item, fh, protocol=pickle.HIGHEST_PROTOCOL)
        return path

    def _rebuild(self, lost: list["Kept"]) -> None:
        """Run the task of each lost side again from its input; the handle then names the new result."""
        for h in lost:
            fn, ref, shipped = h.recipe
            if shipped:
                with open(ref, "rb") as fh:
                    item = self.client.scatter(pickle.load(fh))
            else:
                item = ref
            h.future = self.client.submit(_side_of, fn, item, pure=False)

    def _collect(self, futures: list, items: list, progress: Progress, receive: Receive) -> list:
        """The futures' results in order, each fetched as it completes (and then released on the cluster)."""
        from distributed import as_completed
        index = {f.key: i for i, f in enumerate(futures)}
        out: list = [None] * len(futures)
        with self.client.as_current():
            done = as_completed(futures)
        futures = None  # as_completed holds each until it is yielded
        for n, f in enumerate(done, 1):
            i, res = index[f.key], f.result()
            out[i] = receive(res) if receive else res
            del f
            if progress:
                progress(n, len(items), items[i])
        return out

    def query(self, fn: Callable[[Any, Any], Any], handles: Sequence[Any], args: Sequence[Any]) -> list:
        """``fn(side, arg)`` where each side is; a side lost with its worker is rebuilt from its input and the
        question asked again, up to MAX_REBUILDS times (noted once in :attr:`notes`, for the report)."""
        if not handles:
            return []
        handles, args = list(handles), list(args)
        rebuilt: dict[int, Kept] = {}  # every side this question rebuilt, once, however many attempts it took
        why: list[str] = []
        try:
            for attempt in range(1, MAX_REBUILDS + 2):
                if self.client.status in ("closing", "closed"):
                    raise EngineClosed(CLOSED)
                futures = [h.future if isinstance(h, Kept) else h for h in handles]
                try:
                    return list(self.client.gather(self.client.map(fn, futures, args, pure=False)))
                except Exception as exc:  # noqa: BLE001 - Dask's errors for lost data vary by version and timing
                    if self.client.status in ("closing", "closed"):
                        raise EngineClosed(CLOSED) from None
                    lost = [h for h in handles if isinstance(h, Kept) and h.future.status != "finished"]
                    if not lost or attempt > MAX_REBUILDS:
                        raise
                    self._rebuild(lost)
                    rebuilt.update((id(h), h) for h in lost)
                    why.append(type(exc).__name__)
            raise AssertionError("unreachable")
        finally:
            if rebuilt:  # one loss, one line in the report, however many attempts the rebuild took
                self.notes.append(lost_worker_note(len(rebuilt), why))

    def close(self) -> None:
        self._finalizer()
        fin = getattr(self, "_scratch_fin", None)
        if fin is not None:
            fin()


#: How many times one question rebuilds lost sides and asks again before Dask's error is the answer.
MAX_REBUILDS = 3


class Kept:
    """A side kept on the cluster (a future) and how to make it again: (task, input, whether the input is a
    pickle in the parent's scratch folder). The future is replaced when the side is rebuilt."""

    __slots__ = ("future", "recipe")

    def __init__(self, future: Any, recipe: tuple):
        self.future = future
        self.recipe = recipe


def lost_worker_note(results: int, errors: Sequence[str]) -> str:
    """The report's line for one question whose kept results were rebuilt after a worker loss: how many
    results, Dask's error(s) and, when it took more than one, how many attempts."""
    names = ", ".join(dict.fromkeys(errors))
    tries = f" (in {len(errors)} attempts)" if len(errors) > 1 else ""
    return (f"a Dask worker was lost during the run ({names}): {results} result(s) it kept (per-rank sets or "
            f"member partitions) were rebuilt from their inputs{tries}")


def _side_of(fn: Callable[[Any], tuple[Any, Any]], item: Any) -> Any:
    """Worker: the side half of ``fn(item)`` (a rebuild: the compact half came back the first time)."""
    return fn(item)[1]


def _close_dask(client: Any, cluster: Any) -> None:
    """Close the client, and the LocalCluster when this engine started it."""
    try:
        if client is not None:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()


def default_workers() -> int:
    """Worker count when none is given: the machine's cores."""
    return max(1, os.cpu_count() or 1)


def make_engine(workers: int = 1, dask: Optional[str] = None) -> Engine:
    """The engine for a run: Dask when ``dask`` ("local" or a scheduler address) or $ANALYZE_DASK_SCHEDULER is
    given, else the local pool of ``workers`` processes."""
    address = dask if dask else os.environ.get(SCHEDULER_ENV) or None
    if address:
        return DaskEngine(address.strip(), workers)
    return LocalEngine(workers)
