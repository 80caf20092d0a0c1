"""`benchrun query` output that fits the terminal (benchrun.warehouse.display)."""

import io

from rich.console import Console

from benchrun.warehouse.display import print_rows, table_fits

WIDE = [f"column_{i:02d}" for i in range(27)]


def _console(width):
    return Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)


def test_too_many_columns_become_one_record_per_row_with_every_value_whole():
    con = _console(100)
    rows = [tuple(f"value-{i}-{c}" for c in WIDE) for i in range(2)]
    print_rows(con, WIDE, [rows], caption="2 rows")
    text = con.file.getvalue()
    assert "── row 1 ──" in text and "── row 2 ──" in text
    assert "column_26  value-1-column_26" in text and "…" not in text
    assert "one record per row (the table is wider than the terminal" in text


def test_a_table_when_it_fits_and_long_cells_fold_instead_of_truncating():
    con = _console(80)
    cols = ["run_id", "metric", "value"]
    rows = [("local-canary-20261201002044-5b3a7618", "p99_latency_ms", 21.65)]
    assert table_fits(cols, rows, 80) and not table_fits(WIDE, [], 80)
    print_rows(con, cols, [rows], caption="1 rows")
    text = con.file.getvalue()
    assert "── row" not in text and "local-canary-20261201002044-5b3a7618" in text
    assert "21.65" in text and "p99_latency_ms" in text and "…" not in text
    con = _console(80)
    print_rows(con, cols, [rows], caption="1 rows", vertical=True)  # -x forces records
    text = con.file.getvalue()
    # the footer says why: asked for, not "wider than the terminal" (it fits)
    assert "── row 1 ──" in text and "one record per row, as asked (--vertical)" in text and "wider than" not in text
