"""What makes one run's Iceberg commit cheap and exact: a transaction that builds its metadata
once per change and leaves a lost race to the caller, and a claim of the runs a table has ever
been given, so a run's first curation appends without scanning the table for rows it cannot have.

Measured (``benchmarks/warehouse_scale.py``, 5,000 request rows a run, 50 snapshots kept; profile
in ``benchmarks/README.md``): pyiceberg 0.12.0's ``Transaction.table_metadata`` replays the staged
updates over the table's metadata and deep-copies the result on *every* access (~33 per commit,
each proportional to the snapshots kept), and the delete that makes re-curation idempotent reads
every manifest of the run's day even when the run was never curated. Both are written here
because pyiceberg offers neither: :class:`Transaction` caches the replayed metadata until the
staged updates or the base change (the metadata is a frozen pydantic model; pyiceberg never
mutates it in place), and :func:`first_curation` claims ``(table, run_id)`` in a small table of
the catalog's own database.

Why the claim is safe. Every writer claims before it commits, and a table made by such a writer
holds a claim that says so (:func:`claims_complete`, written before its first row; a table made
before the claims existed gets it only from :func:`claim_existing`, and keeps its deletes until
then). A writer loads the table's base snapshot *first*, then looks whether the table's claims
are complete, then tries to insert its claim; only a writer whose insert succeeded (nobody had
claimed the run for that table before), on a table whose claims were complete *before* it
inserted, skips the delete, and only on its first attempt — its commit still requires the base
snapshot to be current, so a lost race is retried with the delete. Any rows of the run in that
base snapshot were committed by a writer that had claimed it before, or were there before
:func:`claim_existing` read the table's runs — and it did so, and claimed them, before it marked
the claims complete, which this writer saw — so the insert could not have succeeded. Looking
after the insert instead let maintenance mark the claims complete in between without seeing this
writer's run (claimed already), and the writer then skipped the delete of the run's older rows.
A claim is never removed: a stale one only costs a delete that finds nothing (a crash between
the claim and the commit, retention's deletes).
"""

from __future__ import annotations

from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Transaction as _PyicebergTransaction
from pyiceberg.table.update import update_table_metadata

MARKER_TABLE = "benchrun_curated_runs"
_MARKERS: dict[str, Any] = {}  # by database URL


class Transaction(_PyicebergTransaction):
    """pyiceberg's transaction, its ``table_metadata`` computed once per (base, staged updates), and
    without pyiceberg's own retry of a lost commit.

    pyiceberg 0.12.0 retries a commit that lost the race by re-staging its appends and deletes on the
    new head: an append then lands beside rows of the same run that the winner wrote, and a delete
    planned on the old snapshot is checked, not re-planned (measured: eight writers curating one run
    at once left it eight times in ``serving_request_fact``). Here a lost race is a
    ``CommitFailedException`` at once (pyiceberg deletes the files it wrote for the attempt), and the
    caller reloads the table and plans the whole commit again on the snapshot that won."""

    _cached: tuple[Any, tuple, Any] | None = None

    def _rebuild_snapshot_updates(self) -> None:
        raise CommitFailedException("another writer committed first; the commit is planned again on its snapshot")

    @property
    def table_metadata(self) -> Any:  # type: ignore[override]
        base, updates = self._table.metadata, self._updates
        cached = self._cached
        if cached is None or cached[0] is not base or cached[1] is not updates:
            cached = (base, updates, update_table_metadata(base, updates))
            self._cached = cached
        return cached[2]


def _marker_table(cat: Any, *, create: bool = False) -> Any:
    """The marker table of ``cat``'s database, created on first use in this process (or when
    ``create``: the database was replaced under a catalog already open); a lost create race is fine."""
    from sqlalchemy import Column, MetaData, String, Table
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    key = str(cat.engine.url)
    if key not in _MARKERS or create:
        meta = MetaData()
        markers = Table(MARKER_TABLE, meta, Column("table_name", String(255), primary_key=True),
                        Column("run_id", String(255), primary_key=True))
        try:
            meta.create_all(cat.engine, checkfirst=True)
        except (IntegrityError, ProgrammingError, OperationalError) as exc:
            if "already exists" not in str(exc).lower() and not isinstance(exc, IntegrityError):
                raise
        _MARKERS[key] = markers
    return _MARKERS[key]


COMPLETE = ""  # the claim that says every run with rows in the table was claimed (run ids are never empty)


def first_curation(cat: Any, table: str, run_id: str) -> bool:
    """Claim ``run_id`` for ``table``; True when no writer ever had *and* the table's claims are
    complete (it was made by a writer that claims: :func:`claims_complete`), so the caller may append
    without a delete. A table from before the claims keeps its deletes (its runs were never claimed).
    Completeness is read before the claim is inserted (the module's docstring: why)."""
    complete = _complete(cat, table)
    return _claim(cat, table, run_id) and complete


def _complete(cat: Any, table: str) -> bool:
    return not _claim(cat, table, COMPLETE, probe=True)


def claims_complete(cat: Any, table: str) -> None:
    """Say that every run with rows in ``table`` is claimed: called by the writer that created it, before
    any row is in it."""
    _claim(cat, table, COMPLETE)


def claim_existing(cat: Any, table: str, run_ids: Any) -> int:
    """For a table made before the claims (no :data:`COMPLETE`): claim every run it holds, then mark its
    claims complete; the number of runs claimed here (0 when already complete). ``run_ids`` is read
    by the caller from the table *after* this function has seen COMPLETE missing, so a run committed
    since was committed by a writer that claims first. Writers of an older benchrun still running
    against the same catalog are not covered: upgrade them before the maintenance runs."""
    if _complete(cat, table):
        return 0
    n = sum(_claim(cat, table, r) for r in sorted(run_ids()) if r)
    claims_complete(cat, table)
    return n


def _claim(cat: Any, table: str, run_id: str, *, probe: bool = False) -> bool:
    """Insert (table, run_id); True when it was not there. ``probe``: only look (True: absent)."""
    from sqlalchemy import select
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    for attempt in (1, 2):
        markers = _marker_table(cat, create=attempt == 2)
        try:
            with cat.engine.begin() as con:
                if probe:
                    where = (markers.c.table_name == table) & (markers.c.run_id == run_id)
                    return con.execute(select(markers.c.run_id).where(where)).first() is None
                con.execute(markers.insert().values(table_name=table, run_id=run_id))
        except IntegrityError:
            return False
        except (OperationalError, ProgrammingError) as exc:
            text = str(exc).lower()
            if attempt == 2 or not ("no such table" in text or "does not exist" in text):
                raise
            continue
        return True
    raise AssertionError("unreachable")
