"""Audit tables: resets and their queues, topic and group changes, deliveries, queries,
corrections, send-backs and dead letters; filled from the records already applied.

Revision ID: 0002_audit
Revises: 0001_core
Create Date: 2026-11-22

A database at 0001 already holds every record in `records` (as JSON), so the
new tables are backfilled from it and the follower's checkpoint stays valid.
"""

from __future__ import annotations

from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0002_audit"
down_revision = "0001_core"
branch_labels = None
depends_on = None

TABLES = (
    "resets",
    "reset_queues",
    "topic_changes",
    "group_changes",
    "deliveries",
    "offset_queries",
    "corrections",
    "send_backs",
    "dead_letters",
)


def common() -> list[sa.Column]:
    return [
        sa.Column("source", sa.String(200), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("time", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("broker", sa.String(200), nullable=False),
        sa.Column("role", sa.String(50), nullable=False),
        sa.Column("extra", sa.Text(), nullable=True),
    ]


def pk(name: str) -> sa.PrimaryKeyConstraint:
    return sa.PrimaryKeyConstraint("source", "seq", "n", name=f"pk_{name}")


def upgrade() -> None:
    created = [
        op.create_table(
            "resets",
            *common(),
            sa.Column("group", sa.String(255), nullable=False),
            sa.Column("topic", sa.String(255), nullable=False),
            sa.Column("kind", sa.String(50), nullable=False),
            sa.Column("value", sa.BigInteger(), nullable=True),
            sa.Column("timestamp", sa.BigInteger(), nullable=True),
            sa.Column("force", sa.Boolean(), nullable=True),
            sa.Column("mode", sa.String(50), nullable=True),
            sa.Column("scope", sa.String(50), nullable=True),
            sa.Column("requester", sa.String(255), nullable=True),
            sa.Column("outcome", sa.String(100), nullable=True),
            sa.Column("notified", sa.Text(), nullable=True),
            pk("resets"),
        ),
        op.create_table(
            "reset_queues",
            sa.Column("source", sa.String(200), nullable=False),
            sa.Column("seq", sa.BigInteger(), nullable=False),
            sa.Column("queue_id", sa.Integer(), nullable=False),
            sa.Column("current", sa.BigInteger(), nullable=False),
            sa.Column("target", sa.BigInteger(), nullable=False),
            sa.Column("final", sa.BigInteger(), nullable=False),
            sa.Column("outcome", sa.String(100), nullable=False),
            sa.PrimaryKeyConstraint("source", "seq", "queue_id", name="pk_reset_queues"),
        ),
        op.create_table(
            "topic_changes",
            *common(),
            sa.Column("topic", sa.String(255), nullable=False),
            sa.Column("old_perm", sa.Integer(), nullable=True),
            sa.Column("perm", sa.Integer(), nullable=True),
            sa.Column("read_queue_nums", sa.Integer(), nullable=True),
            sa.Column("write_queue_nums", sa.Integer(), nullable=True),
            sa.Column("cause", sa.String(100), nullable=True),
            sa.Column("requester", sa.String(255), nullable=True),
            sa.Column("config", sa.Text(), nullable=True),
            pk("topic_changes"),
        ),
        op.create_table(
            "group_changes",
            *common(),
            sa.Column("group", sa.String(255), nullable=False),
            sa.Column("cause", sa.String(100), nullable=True),
            sa.Column("requester", sa.String(255), nullable=True),
            sa.Column("config", sa.Text(), nullable=True),
            pk("group_changes"),
        ),
        op.create_table(
            "deliveries",
            *common(),
            sa.Column("group", sa.String(255), nullable=False),
            sa.Column("topic", sa.String(255), nullable=False),
            sa.Column("queue_id", sa.Integer(), nullable=False),
            sa.Column("offset", sa.BigInteger(), nullable=False),
            sa.Column("next_offset", sa.BigInteger(), nullable=True),
            sa.Column("count", sa.Integer(), nullable=False),
            sa.Column("client", sa.String(255), nullable=True),
            sa.Column("offsets", sa.Text(), nullable=True),
            pk("deliveries"),
        ),
        op.create_table(
            "offset_queries",
            *common(),
            sa.Column("group", sa.String(255), nullable=False),
            sa.Column("topic", sa.String(255), nullable=False),
            sa.Column("queue_id", sa.Integer(), nullable=False),
            sa.Column("row", sa.Integer(), nullable=True),
            sa.Column("offset", sa.BigInteger(), nullable=True),
            sa.Column("code", sa.Integer(), nullable=True),
            sa.Column("min_offset", sa.BigInteger(), nullable=True),
            sa.Column("head_in_memory", sa.Boolean(), nullable=True),
            sa.Column("phy_max", sa.BigInteger(), nullable=True),
            sa.Column("requester", sa.String(255), nullable=True),
            pk("offset_queries"),
        ),
        op.create_table(
            "corrections",
            *common(),
            sa.Column("kind", sa.String(100), nullable=False),
            sa.Column("group", sa.String(255), nullable=True),
            sa.Column("topic", sa.String(255), nullable=True),
            sa.Column("queue_id", sa.Integer(), nullable=True),
            sa.Column("status", sa.String(100), nullable=True),
            sa.Column("offset", sa.BigInteger(), nullable=True),
            sa.Column("next_offset", sa.BigInteger(), nullable=True),
            sa.Column("min_offset", sa.BigInteger(), nullable=True),
            sa.Column("max_offset", sa.BigInteger(), nullable=True),
            sa.Column("lost", sa.BigInteger(), nullable=True),
            sa.Column("reason", sa.String(100), nullable=True),
            sa.Column("requester", sa.String(255), nullable=True),
            pk("corrections"),
        ),
        op.create_table(
            "send_backs",
            *common(),
            sa.Column("group", sa.String(255), nullable=True),
            sa.Column("topic", sa.String(255), nullable=True),
            sa.Column("queue_id", sa.Integer(), nullable=True),
            sa.Column("decision", sa.String(50), nullable=True),
            sa.Column("target_topic", sa.String(255), nullable=True),
            sa.Column("dead_letter", sa.Boolean(), nullable=True),
            sa.Column("reconsume_times", sa.Integer(), nullable=True),
            sa.Column("delay_level", sa.Integer(), nullable=True),
            sa.Column("msg_id", sa.String(255), nullable=True),
            sa.Column("requester", sa.String(255), nullable=True),
            pk("send_backs"),
        ),
        op.create_table(
            "dead_letters",
            *common(),
            sa.Column("group", sa.String(255), nullable=True),
            sa.Column("topic", sa.String(255), nullable=False),
            sa.Column("queue_id", sa.Integer(), nullable=True),
            sa.Column("queue_offset", sa.BigInteger(), nullable=True),
            sa.Column("count", sa.Integer(), nullable=False),
            sa.Column("origin_topic", sa.String(255), nullable=True),
            sa.Column("requester", sa.String(255), nullable=True),
            pk("dead_letters"),
        ),
    ]
    op.create_index(
        "ix_resets_source_group_topic_seq", "resets", ["source", "group", "topic", "seq"]
    )
    op.create_index(
        "ix_topic_changes_source_topic_seq", "topic_changes", ["source", "topic", "seq"]
    )
    op.create_index(
        "ix_group_changes_source_group_seq", "group_changes", ["source", "group", "seq"]
    )
    op.create_index(
        "ix_deliveries_source_group_topic_queue_id_seq",
        "deliveries",
        ["source", "group", "topic", "queue_id", "seq"],
    )
    op.create_index("ix_corrections_source_group_seq", "corrections", ["source", "group", "seq"])
    op.create_index("ix_send_backs_source_group_seq", "send_backs", ["source", "group", "seq"])
    op.create_index("ix_dead_letters_source_group_seq", "dead_letters", ["source", "group", "seq"])
    backfill({t.name: t for t in created})


def backfill(tables: dict[str, sa.Table]) -> None:
    """Rows of the new tables for the records already applied (they are all in `records`)."""
    from es_broker.readmodel.follower import table_rows
    from es_broker.schema.families import Source, from_json

    conn = op.get_bind()
    records = sa.table(
        "records",
        sa.column("source"),
        sa.column("seq"),
        sa.column("time"),
        sa.column("broker"),
        sa.column("role"),
        sa.column("body"),
    )
    query = sa.select(records).order_by(records.c.source, records.c.seq)
    pending: dict[str, list[dict]] = defaultdict(list)
    for row in conn.execute(query).mappings():
        rows = table_rows(
            row["source"],
            row["seq"],
            from_json(row["body"]),
            row["time"],
            Source(row["broker"], row["role"]),
        )
        for name, table in tables.items():
            columns = set(table.c.keys())
            pending[name].extend(
                {k: v for k, v in r.items() if k in columns} for r in rows.get(name, ())
            )
        if sum(len(v) for v in pending.values()) >= 5000:
            _flush(conn, tables, pending)
    _flush(conn, tables, pending)


def _flush(conn, tables: dict[str, sa.Table], pending: dict[str, list[dict]]) -> None:
    for name, rows in pending.items():
        if rows:
            conn.execute(tables[name].insert(), rows)
    pending.clear()


def downgrade() -> None:
    for name in reversed(TABLES):
        op.drop_table(name)
