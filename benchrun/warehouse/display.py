"""How `benchrun query` shows rows in a terminal: a table when it fits, else one record per row.

Display only (the query itself runs in benchrun.warehouse.views). A table that is wider
than the terminal is never squeezed until every column reads `loc…`: it becomes a record
view (`column  value`, one block per row), like psql's expanded display. Rows are tuples in
the columns' order: two columns may share a name (a join's ``raw_path`` from both sides).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Sequence

# A column narrower than this (or its header, if shorter) is not worth showing as a table.
MIN_COLUMN = 12
# Longest cell the fitting estimate counts; longer cells fold onto more lines.
MAX_COLUMN = 40
# The rows the fitting estimate looks at (the first ones): records stream after these.
FIT_ROWS = 200


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def table_fits(columns: Sequence[str], rows: Sequence[Sequence[Any]], width: int) -> bool:
    """Whether every column can get at least its header or MIN_COLUMN characters in ``width``
    (judged on the first FIT_ROWS rows)."""
    need = 1
    for i, c in enumerate(columns):
        longest = max([len(c)] + [len(cell(r[i])) for r in rows[:FIT_ROWS]])
        need += min(longest, max(min(len(c), MAX_COLUMN), MIN_COLUMN), MAX_COLUMN) + 3
    return need <= width


def print_rows(con: Any, columns: Sequence[str], batches: Iterable[Sequence[Sequence[Any]]], *,
               caption: str | Callable[[], str], vertical: bool | None = None) -> None:
    """Print the rows as a table if it fits the console (or ``vertical=False``), else as records.

    Records are printed as the batches come (only the first FIT_ROWS rows, which decide table or
    records, are held); a table holds its rows. ``caption`` may be a function, called once every
    row is printed (a row count known only then)."""
    from rich.markup import escape
    from rich.table import Table

    batches = iter(batches)
    first: list[Sequence[Any]] = []
    if vertical is None:
        for batch in batches:
            first.extend(batch)
            if len(first) >= FIT_ROWS:
                break
    asked = vertical is True
    if vertical is None:
        vertical = not table_fits(columns, first, con.width)
    title = caption if callable(caption) else (lambda: caption)
    if vertical:
        label = max((len(c) for c in columns), default=0)
        n = 0
        for batch in itertools.chain([first], batches):
            for row in batch:
                n += 1
                con.print(f"[bold]── row {n} ──[/]")
                for c, value in zip(columns, row):
                    con.print(f"{escape(c):<{label}}  {escape(cell(value))}", soft_wrap=True)
        why = (", as asked (--vertical)" if asked else
               " (the table is wider than the terminal; select fewer columns for a table)")
        con.print(escape(title()) + (f"; one record per row{why}" if n else ""))
        return
    rows = first + [r for batch in batches for r in batch]
    out = Table(caption=escape(title()))
    for c in columns:
        out.add_column(escape(c), overflow="fold", min_width=min(len(c), MIN_COLUMN))
    for r in rows:
        out.add_row(*[escape(cell(v)) for v in r])
    con.print(out)
