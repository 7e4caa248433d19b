"""How many rows a piece of work reads, as PostgreSQL's own plan counts them: for checks that what a tick or a
page reads does not grow with the history kept (a year of proposals, events and alerts).

A test database is small, and PostgreSQL reads a small table whole whatever its indexes. With sequential scans
off (and fresh statistics) it plans each query as it would on a large table, so the rows its scans touch are
those an index bounds, or every row when no index does: the count that grows with history.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext


def _scanned(node: dict[str, Any]) -> int:
    read = 0
    if "Scan" in node["Node Type"]:
        read = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
                + node.get("Rows Removed by Index Recheck", 0)) * node.get("Actual Loops", 1)
    return read + sum(_scanned(child) for child in node.get("Plans", []))


def rows_read(sql: str) -> int:
    """The rows the scans of one SELECT touch, planned as on a large table."""
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
            plan = cursor.fetchone()[0]
        finally:
            cursor.execute("RESET enable_seqscan")
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return _scanned(plan[0]["Plan"])


def reads_of(work: Callable[[], object]) -> dict[str, int]:
    """Run `work`, then read each SELECT it made again: the rows each touched, by its SQL (the most of repeats)."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    with CaptureQueriesContext(connection) as captured:
        work()
    reads: dict[str, int] = {}
    for query in captured.captured_queries:
        sql = query["sql"]
        if sql.lstrip().upper().startswith("SELECT") and "FOR UPDATE" not in sql:
            key = re.sub(r"'\d{4}-\d\d-\d\d[^']*'", "'<time>'", sql)  # the same query at another clock
            reads[key] = max(reads.get(key, 0), rows_read(sql))
    return reads


def grown(before: dict[str, int], after: dict[str, int], slack: int = 20) -> dict[str, tuple[int, int]]:
    """The queries of `after` that read more than `slack` rows beyond what the same query read in `before`."""
    return {sql[:400]: (before.get(sql, 0), rows) for sql, rows in after.items() if rows > before.get(sql, 0) + slack}
