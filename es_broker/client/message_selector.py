"""MessageSelector: how a consumer filters a topic, by tags or by a SQL92 expression (Java's MessageSelector)."""

from __future__ import annotations

from dataclasses import dataclass

TAG = "TAG"  # ExpressionType.TAG
SQL92 = "SQL92"  # ExpressionType.SQL92: needs a broker with enablePropertyFilter=true


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """A subscription expression and its type; `by_tag("*")` takes every message."""

    expression_type: str
    expression: str

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        """Messages whose properties satisfy a SQL92 expression, e.g. `a > 5 AND region = 'eu'`."""
        return cls(SQL92, sql)

    @classmethod
    def by_tag(cls, tags: str | None = "*") -> MessageSelector:
        """Messages with one of the tags `a || b`; `*` or nothing takes every message."""
        return cls(TAG, tags or "*")
