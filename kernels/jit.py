"""How the CPU kernels run: compiled by Numba, or interpreted for a small run.

Every kernel of this package is written once, as a Python function over
arrays and integers, and decorated with :func:`njit`. The decorator returns a
:class:`Kernel`: called, it runs Numba's compiled function, which it builds
on first use (importing Numba then, not when the kernels are imported) with
the same options and the same code, so that Numba's cache finds what an
earlier run compiled. Inside compiled code a kernel calls the others as
Numba dispatchers, as before.

A run too small to pay for Numba (its import, its CPU target and the loading
of each cached kernel take about half a second, more than everything else a
run of a hundred documents does) runs its kernels interpreted instead, in
:func:`interpreted`: each kernel's own Python function, run by the
interpreter on NumPy arrays and scalars with wrap-around integer overflow,
so the values are those of the compiled code (NumPy's ``uint64`` wraps as
the machine's does). The few kernels that touch every byte or every pair
are too slow that way; each of them names a whole-array NumPy function
with the same arguments and the same results
(``@njit(..., stand_in="vector_text.oph_blocks")``, a function of a module
of this package, found on first use: :attr:`Kernel.vector`; the tests
compare each with the compiled kernel bit for bit). Interpreted or
compiled, a kernel's results are the same.

The mode is the calling thread's: the kernels' thread pool
(:func:`kernels.threads.for_range`) runs an interpreted kernel on the
calling thread alone.
"""
from __future__ import annotations

import functools
import importlib
import threading
import types

import numpy as np

_local = threading.local()
_build_lock = threading.RLock()

#: Called as ``on_call(kernel, args)`` before each call of a kernel from
#: Python, compiled or interpreted (calls from compiled code apart); None:
#: nothing is called. Set by :mod:`.ahead` (a first run's compile ahead, and
#: recording what a run calls).
on_call = None


def interpreting() -> bool:
    """Whether kernels called on this thread run interpreted."""
    return getattr(_local, "on", False)


def interpreted_block():
    """A token of the outermost :func:`interpreted` block running on this
    thread (a new one for each block), None outside one: what stand-ins
    may key values they keep from call to call on, so that none outlives
    the run that made it."""
    return getattr(_local, "token", None) if interpreting() else None


#: Called with the token of each outermost :func:`interpreted` block that
#: ends (stand-ins drop what they kept for it).
on_block_end: list = []


class interpreted:
    """Run the kernels called on this thread interpreted, within the
    ``with`` block (nested blocks are fine). ``active=False`` makes it a
    block that changes nothing."""

    def __init__(self, active: bool = True):
        self.active = bool(active)
        self._before = None
        self._errstate = None

    def __enter__(self):
        self.active = self.active and not getattr(_local, "compile", False)
        if self.active:
            self._before = interpreting()
            if not self._before:
                _local.token = object()
            _local.on = True
            self._errstate = np.errstate(over="ignore")
            self._errstate.__enter__()
        return self

    def __exit__(self, *exc):
        if self.active:
            self._errstate.__exit__(*exc)
            _local.on = self._before
            if not self._before:
                token, _local.token = _local.token, None
                for end in on_block_end:
                    end(token)
        return False


class compiled_here:
    """Within the ``with`` block, the kernels called on this thread run
    compiled even inside an :func:`interpreted` block (a stage that turns
    out heavier than the run's estimate); ``active=False`` makes it a block
    that changes nothing. The results are the same either way."""

    def __init__(self, active: bool = True):
        self.active = bool(active)
        self._before = None

    def __enter__(self):
        if self.active:
            self._before = getattr(_local, "on", False)
            _local.on = False
        return self

    def __exit__(self, *exc):
        if self.active:
            _local.on = self._before
        return False


class compiling:
    """Within the ``with`` block, :func:`interpreted` blocks on this thread
    change nothing: the kernels run compiled (to fill Numba's cache, or to
    compare the two ways)."""

    def __enter__(self):
        self._before = getattr(_local, "compile", False)
        _local.compile = True
        return self

    def __exit__(self, *exc):
        _local.compile = self._before
        return False


def load_numba_ahead() -> threading.Thread | None:
    """Start importing Numba and loading its CPU target in a daemon thread
    (about half a second, most of what the first compiled kernel of a process
    costs before its own code loads), so that a run that reads its input
    first finds it done when its first kernel is called. The thread holds
    Numba's compiler lock while it loads, as a first kernel call would, so
    either order is safe; nothing is started where kernels run interpreted.
    Returns the thread, or None."""
    if interpreting():
        return None
    t = threading.Thread(target=_load_numba, name="gpu-dedup-load-numba", daemon=True)
    t.start()
    return t


def _load_numba() -> None:
    try:
        with _build_lock:                   # every import of Numba here is under it:
            from numba.core.compiler_lock import global_compiler_lock  # two threads
            from numba.core.registry import cpu_target   # importing its modules at
        with global_compiler_lock:                        # once can deadlock
            cpu_target.target_context.refresh()
    except (ImportError, AttributeError):   # Numba's internals are no API: if they
        pass                                # moved, the first kernel loads it instead


class Kernel:
    """A kernel: its Python function, compiled by Numba on first use.

    Attributes:
        py_func: the Python function (the code Numba compiles).
        options: Numba's options (``cache``, ``nogil``).
        stand_in: ``"module.function"`` of this package: a whole-array NumPy
            function with the same arguments and results, run instead of
            ``py_func`` when interpreted (None: the function itself runs).
        vector: what runs when interpreted, once found: that function, or
            ``py_func`` where there is none.
    """

    def __init__(self, py_func, options: dict, stand_in: str | None = None):
        self.py_func = py_func
        self.options = dict(options)
        self.stand_in = stand_in
        self.vector = None
        self._compiled = None
        self._twin = None
        #: ``module.function`` within this package's kernels (``cpu._oph_blocks``)
        self.name = f"{py_func.__module__.rsplit('.', 1)[-1]}.{py_func.__qualname__}"
        functools.update_wrapper(self, py_func)

    def __call__(self, *args):
        if on_call is not None:
            on_call(self, args)
        if getattr(_local, "on", False):
            return (self.vector or self._interpreted())(*args)
        return (self._compiled or self.compiled)(*args)

    def _interpreted(self):
        """What runs when interpreted: the stand-in, else the function."""
        if self.stand_in is None:
            self.vector = self.py_func
            return self.vector
        module, name = self.stand_in.rsplit(".", 1)
        package = self.py_func.__module__.rsplit(".", 1)[0]
        self.vector = getattr(importlib.import_module(f"{package}.{module}"), name)
        return self.vector

    @property
    def compiled(self):
        """Numba's dispatcher of this kernel, built (not yet compiled) on the
        first call: the same code, whose calls to other kernels are calls
        to their dispatchers."""
        if self._compiled is None:
            with _build_lock:
                g = _mapped_globals(self.py_func.__globals__, "compiled")  # may build it too
                if self._compiled is None:
                    from numba import njit as numba_njit
                    d = numba_njit(**self.options)(self._with_globals(g))
                    _typed_as_values(d)
                    _cache_locked(d)
                    self._compiled = d
        return self._compiled

    @property
    def twin(self):
        """The kernel's Python function calling the twins of the kernels it
        calls, whatever the thread's mode: what Numba's CUDA simulator runs
        (its threads are not this module's)."""
        if self._twin is None:
            with _build_lock:
                g = _mapped_globals(self.py_func.__globals__, "twin")
                if self._twin is None:
                    self._twin = self._with_globals(g)
        return self._twin

    def _with_globals(self, g: dict):
        """The kernel's code as a function of the globals ``g``."""
        py = self.py_func
        f = types.FunctionType(py.__code__, g, py.__name__, py.__defaults__, py.__closure__)
        f.__qualname__ = py.__qualname__
        f.__doc__ = py.__doc__
        return f

    def __repr__(self) -> str:
        return f"<kernel {self.py_func.__module__}.{self.py_func.__qualname__}>"


def _typed_as_values(dispatcher) -> None:
    """Make a kernel called from compiled code compile for the types of its
    arguments, never for the constants passed (``f(x, 0)``: ``int64``, not
    ``Literal[int](0)``), as a call from Python does. Numba would otherwise
    compile a kernel once more for each constant a caller passes (12 of the
    112 compilations of a first ``gpu-dedup demo``); the code and its
    results are the same."""
    from numba.core import types as nb_types
    resolve = dispatcher.get_call_template

    def get_call_template(args, kws):
        return resolve(tuple(nb_types.unliteral(a) for a in args),
                       {k: nb_types.unliteral(v) for k, v in kws.items()})
    dispatcher.get_call_template = get_call_template


_cache_lock_installed = None


def lock_cache() -> bool:
    """Make Numba read and write the cache files of this package's kernels
    (each one's index, then its data) under an exclusive lock of their
    folder: ``fcntl.flock`` of a file ``gpu-dedup.lock`` there. Processes
    that compile at once (a run and its helper, :mod:`.ahead`; Dask's
    workers) could otherwise give one data file to two signatures of a
    kernel, or read an index whose data is not written yet. Other Numba
    functions of the process are left as they are. False where it cannot be
    done (no ``fcntl``, or Numba's cache classes changed)."""
    global _cache_lock_installed
    with _build_lock:
        if _cache_lock_installed is None:
            _cache_lock_installed = _install_cache_lock()
    return _cache_lock_installed


def _install_cache_lock() -> bool:
    import contextlib
    import os
    try:
        import fcntl

        from numba.core import caching
        cls = caching.IndexDataCacheFile
        save, load = cls.save, cls.load
    except (ImportError, AttributeError):
        return False

    @contextlib.contextmanager
    def held(cache_file, saving: bool):
        fd = None
        if getattr(cache_file, "_gpu_dedup", False):
            try:
                folder = cache_file._cache_path
                if saving:                   # Numba makes the folder to save; a load
                    os.makedirs(folder, exist_ok=True)   # from none finds nothing
                if os.path.isdir(folder):
                    fd = os.open(os.path.join(folder, "gpu-dedup.lock"),
                                 os.O_CREAT | os.O_RDWR, 0o600)
                    fcntl.flock(fd, fcntl.LOCK_EX)
            except (AttributeError, OSError):  # a folder it cannot write: as Numba does
                if fd is not None:
                    os.close(fd)
                fd = None
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)                 # releases the lock

    def locked_save(self, key, data):
        with held(self, True):
            return save(self, key, data)

    def locked_load(self, key):
        with held(self, False):
            return load(self, key)

    cls.save, cls.load = locked_save, locked_load
    return True


def _cache_locked(dispatcher) -> None:
    """Mark a kernel's cache files as read and written under
    :func:`lock_cache`'s lock (installing it)."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    if cache_file is not None and lock_cache():
        cache_file._gpu_dedup = True


_MAPPED_GLOBALS: dict = {}


def _mapped_globals(module_globals: dict, way: str) -> dict:
    """A copy of a kernel module's globals in which every :class:`Kernel` is
    its ``way`` (``compiled``: its Numba dispatcher; ``twin``: its Python
    twin), made once a module and way."""
    key = (id(module_globals), way)
    out = _MAPPED_GLOBALS.get(key)
    if out is None:
        out = _MAPPED_GLOBALS[key] = dict(module_globals)   # before the kernels: they
        for name, value in module_globals.items():          # build theirs with it
            if isinstance(value, Kernel):
                out[name] = getattr(value, way)
    return out


def njit(*args, **options):
    """``numba.njit`` for this package's kernels, without importing Numba:
    ``@njit`` or ``@njit(cache=True, nogil=True)`` make a :class:`Kernel`;
    ``stand_in`` names the kernel's whole-array NumPy stand-in (see
    :class:`Kernel`)."""
    if args and callable(args[0]) and not options:
        return Kernel(args[0], {})
    if args:
        raise TypeError("njit takes only keyword options")
    stand_in = options.pop("stand_in", None)
    return lambda f: Kernel(f, options, stand_in)
