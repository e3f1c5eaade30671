"""Queue locks: every change of owner of an orderly consumer's queue lock (B-142..B-147).

Revision ID: 0005_queue_locks
Revises: 0004_free_text
Create Date: 2026-12-10

One row per queue of a `queue_locks_changed` record; the owner ('' when released)
holds the queue from `time` until the queue's next row.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_queue_locks"
down_revision = "0004_free_text"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queue_lock_changes",
        sa.Column("source", sa.String(200), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("time", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("broker", sa.String(200), nullable=False),
        sa.Column("role", sa.String(50), nullable=False),
        sa.Column("extra", sa.Text(), nullable=True),
        sa.Column("group", sa.String(255), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("broker_name", sa.String(255), nullable=False),
        sa.Column("queue_id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("previous_owner", sa.Text(), nullable=False),
        sa.Column("previous_renewed_at", sa.BigInteger(), nullable=False),
        sa.Column("cause", sa.String(100), nullable=False),
        sa.Column("client", sa.Text(), nullable=True),
        sa.Column("max_live_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("source", "seq", "n", name="pk_queue_lock_changes"),
    )
    op.create_index(
        "ix_queue_lock_changes_source_group_topic_queue_id_seq",
        "queue_lock_changes",
        ["source", "group", "topic", "queue_id", "seq"],
    )
    op.create_index("ix_queue_lock_changes_source_time", "queue_lock_changes", ["source", "time"])


def downgrade() -> None:
    op.drop_table("queue_lock_changes")
