"""How `benchrun query` shows rows in a terminal: a table when it fits, else one record per row.

Display only (the query itself runs in benchrun.warehouse.views). A table that is wider
than the terminal is never squeezed until every column reads `loc…`: it becomes a record
view (`column  value`, one block per row), like psql's expanded display.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

# A column narrower than this (or its header, if shorter) is not worth showing as a table.
MIN_COLUMN = 12
# Longest cell the fitting estimate counts; longer cells fold onto more lines.
MAX_COLUMN = 40


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def table_fits(columns: Sequence[str], rows: Sequence[dict[str, Any]], width: int) -> bool:
    """Whether every column can get at least its header or MIN_COLUMN characters in ``width``."""
    need = 1
    for c in columns:
        longest = max([len(c)] + [len(cell(r.get(c))) for r in rows[:200]])
        need += min(longest, max(min(len(c), MAX_COLUMN), MIN_COLUMN), MAX_COLUMN) + 3
    return need <= width


def print_rows(con: Any, columns: Sequence[str], batches: Iterable[Sequence[dict[str, Any]]], *, caption: str,
               vertical: bool | None = None) -> None:
    """Print the rows as a table if it fits the console (or ``vertical=False``), else as records."""
    from rich.markup import escape
    from rich.table import Table

    rows = [r for batch in batches for r in batch]
    asked = vertical is True
    if vertical is None:
        vertical = not table_fits(columns, rows, con.width)
    if vertical:
        label = max((len(c) for c in columns), default=0)
        for i, row in enumerate(rows, 1):
            con.print(f"[bold]── row {i} ──[/]")
            for c in columns:
                con.print(f"{escape(c):<{label}}  {escape(cell(row.get(c)))}", soft_wrap=True)
        why = (", as asked (--vertical)" if asked else
               " (the table is wider than the terminal; select fewer columns for a table)")
        con.print(escape(caption) + (f"; one record per row{why}" if rows else ""))
        return
    out = Table(caption=escape(caption))
    for c in columns:
        out.add_column(escape(c), overflow="fold", min_width=min(len(c), MIN_COLUMN))
    for r in rows:
        out.add_row(*[escape(cell(r.get(c))) for c in columns])
    con.print(out)
