"""The run report: a self-contained HTML page with the statistics, comparison, serving curves and history."""
