"""The train step's process ends as soon as its work is durable, not seconds later.

A train process that imported torch (and, with any torch optimizer, torch._dynamo and sympy)
spent 1 to 3 s after its last act, its emergency save committed and its exit record written,
in the interpreter's finalization: tearing down thousands of modules and torch's C++ state
(issue 44: the recovery split's ``teardown``, 3.2 s of every restart). :func:`quick_exit` does
what Python's exit guarantees, in the same order, and leaves out that teardown:

1. ``threading._shutdown``, as the interpreter's exit calls it first: the executors'
   pending work (``concurrent.futures``) and every non-daemon thread finish (a writer still
   uploading);
2. runs the ``atexit`` handlers (logging's flush and close, ``multiprocessing``'s children,
   ``weakref.finalize`` callbacks such as temporary directories' removal, coverage's data);
3. flushes ``sys.stdout`` and ``sys.stderr``;
4. ``os._exit(code)``.

What it leaves out is the collection of the objects still alive at exit, which Python does
not promise to finalize either: everything the step must keep (checkpoints, their manifests,
the attempt record, the step document, the ranks' exit records) is written, closed and
renamed into place before the step's ``main`` returns, so the code the runner sees is the
same and follows the same files. A process under a profiler or a tracer exits as before.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def quick_exit(code: int) -> NoReturn:
    """Exit with ``code`` once threads, ``atexit`` handlers and stdio are done. Under a
    profiler or a tracer (``python -m cProfile``, a debugger), which may act after the
    program returns, the interpreter's own exit."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter calls first
    if shutdown is not None:
        shutdown()
    else:  # (an interpreter without it: the non-daemon threads at least)
        me = threading.current_thread()
        for thread in threading.enumerate():
            if thread is not me and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # (closed, or a reader gone)
            stream.flush()
    os._exit(code)
