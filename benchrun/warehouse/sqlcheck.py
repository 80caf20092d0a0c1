"""What ``benchrun query`` lets run: one SELECT (or EXPLAIN of one), judged by DuckDB's own parser
and tokenizer, with no refused keyword or function anywhere in it (a leaf: DuckDB only).

The connection itself is the other half (``benchrun.warehouse.views``): external access off, the
configuration locked, credential settings emptied."""

from __future__ import annotations

import re

from benchrun.errors import BenchrunError

READ_ONLY_TYPES = ("SELECT", "EXPLAIN")
# Keywords refused anywhere in a user's query, including inside EXPLAIN [ANALYZE] (which
# executes what it wraps) and DuckDB's rewrites (PRAGMA x and SHOW parse as SELECT).
# Checked on DuckDB's own tokenizer, so a keyword in a string literal, comment or quoted
# identifier does not count and no spelling or spacing trick hides one.
REFUSED_KEYWORDS = frozenset({
    "COPY", "EXPORT", "IMPORT", "ATTACH", "DETACH", "INSTALL", "LOAD", "SET", "RESET", "PRAGMA",
    "CALL", "CHECKPOINT", "VACUUM", "USE", "CREATE", "INSERT", "UPDATE", "DELETE", "DROP",
    "ALTER", "TRUNCATE", "MERGE", "PREPARE", "EXECUTE", "DEALLOCATE", "BEGIN", "COMMIT", "ROLLBACK",
})
# Functions refused in a user's query: the connection's S3 secret (duckdb_secrets() redacts the
# secret key but shows the access key id and endpoint), and the table functions that run SQL
# from a string (query, query_table, json_execute_serialized_sql), which the checks here could
# not see into. Matched on identifier tokens (quoted or not); the dynamic ones only as a call.
SECRET_FUNCTIONS = frozenset({"duckdb_secrets", "which_secret"})
DYNAMIC_SQL_FUNCTIONS = frozenset({"query", "query_table", "json_execute_serialized_sql",
                                   "json_deserialize_sql", "json_serialize_sql"})


_QUOTED = re.compile(r'"((?:[^"]|"")*)"')
_BARE = re.compile(r"[^\s(),;/\-]+")


def _token_text(span: str) -> str:
    """A keyword's or identifier's own text from the span up to the next token: DuckDB's tokenizer
    yields no comment tokens, so ``query /**/ (`` spans the comment too (it slipped past the checks)."""
    quoted = _QUOTED.match(span)
    if quoted:
        return quoted.group(1).replace('""', '"')
    bare = _BARE.match(span)
    return bare.group(0) if bare else span.strip()


def check_read_only(sql: str) -> None:
    """Refuse anything but one SELECT (or EXPLAIN of one SELECT), judged by DuckDB's own parser.

    The statement type comes from ``duckdb.extract_statements``; an EXPLAIN is unwrapped and
    its inner statement must be a SELECT too; and DuckDB's tokenizer must find none of
    ``REFUSED_KEYWORDS`` anywhere in the text.
    """
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise BenchrunError(f"query: not valid SQL ({str(exc).splitlines()[0]})") from exc
    if len(statements) != 1:
        raise BenchrunError(f"query: give exactly one statement, not {len(statements)}")
    kind = statements[0].type.name
    if kind not in READ_ONLY_TYPES:
        raise BenchrunError(f"query: {kind} statements are refused; the warehouse is read-only here (use SELECT)")
    tokens = duckdb.tokenize(sql)
    words = []
    for i, (start, token_type) in enumerate(tokens):
        end = tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)
        if token_type == duckdb.token_type.keyword:
            words.append((start, _token_text(sql[start:end]).upper()))
        elif token_type == duckdb.token_type.identifier:
            name = _token_text(sql[start:end]).lower()
            call = i + 1 < len(tokens) and sql[tokens[i + 1][0]:].startswith("(")
            if name in SECRET_FUNCTIONS or (call and name in DYNAMIC_SQL_FUNCTIONS):
                raise BenchrunError(f"query: {name}() is refused here (it reads the connection's credentials or "
                                    "runs SQL from a string); query the warehouse views")
    for _, word in words:
        if word in REFUSED_KEYWORDS:
            raise BenchrunError(f"query: {word} is refused anywhere in a query (also inside EXPLAIN); "
                                "the warehouse is read-only here (use SELECT)")
    if kind == "EXPLAIN":
        # Unwrap EXPLAIN [ANALYZE] and parse what it wraps: it must be a SELECT as well.
        rest = [w for w in words[:3]]
        skip = 1 + (1 if len(rest) > 1 and rest[1][1] == "ANALYZE" else 0)
        inner_start = words[skip][0] if len(words) > skip else len(sql)
        try:
            inner = duckdb.extract_statements(sql[inner_start:])
        except duckdb.Error as exc:
            raise BenchrunError(f"query: not valid SQL inside EXPLAIN ({str(exc).splitlines()[0]})") from exc
        if len(inner) != 1 or inner[0].type.name != "SELECT":
            found = inner[0].type.name if inner else "nothing"
            raise BenchrunError(f"query: EXPLAIN of {found} is refused; only EXPLAIN of a SELECT runs here")
