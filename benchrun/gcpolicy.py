"""The cyclic garbage collector and a process that imports Dagster, pandas and scipy.

Those imports leave ~206,000 long-lived container objects (modules, classes, functions,
type hints), many in reference cycles (a function's globals hold the function). Python's
collector walks every one of them in each full (generation-2) collection: a canary run made
five of those (0.52 s); and at exit the interpreter's last collections walk them and free
those in cycles one by one, 0.9 s of its 1.1 s shutdown (benchmarks/README.md, "Fourth
pass"). ``gc.freeze`` moves objects into a permanent generation that collections skip, which
is what it is for (CPython's docs: before a fork, and for objects that live as long as the
process). Objects are still freed when their last reference goes; only cyclic garbage among
frozen objects is never collected, which for objects made at start-up and kept to the end is
none that matters (and at exit the system takes the memory back at once).
"""

from __future__ import annotations

import atexit
import gc


# Set while the process is the benchrun command (``benchrun.cli.main``): code that runs a
# command inside another program (tests, an embedding application) leaves its collector alone.
in_command = False


def freeze_long_lived(collect: bool = False) -> None:
    """Move every object that exists now out of later collections' way (the imports, the
    definitions, the instance), when this process is the benchrun command. With ``collect``,
    collect first, so that no garbage is kept (a warm orchestrator, which pays it once for
    every command it forks)."""
    if not in_command:
        return
    if collect:
        gc.collect()
    gc.freeze()


def skip_the_final_collection() -> None:
    """At exit, do not walk the objects left: an exit handler that freezes them, so the
    interpreter's last full collection finds nothing to do. Exit handlers (weakref finalizers,
    logging) still run and objects are still freed as their modules are cleared; only cyclic
    garbage is left to the process's end, as ``os._exit`` (a warm orchestrator's child) leaves
    everything. Registered once however often it is called."""
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
