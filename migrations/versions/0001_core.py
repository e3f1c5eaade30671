"""Core of the read model: checkpoints, every record, offset changes, queue appends.

Revision ID: 0001_core
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_core"
down_revision = None
branch_labels = None
depends_on = None


def common() -> list[sa.Column]:
    """Columns of every record row (es_broker.readmodel.models._Row)."""
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


def upgrade() -> None:
    op.create_table(
        "readmodel_checkpoints",
        sa.Column("source", sa.String(200), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("max_ts", sa.BigInteger(), nullable=False),
        sa.Column("start_time", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("source", name="pk_readmodel_checkpoints"),
    )
    op.create_table(
        "records",
        *common(),
        sa.Column("v", sa.Integer(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("source", "seq", "n", name="pk_records"),
    )
    op.create_index("ix_records_source_type_seq", "records", ["source", "type", "seq"])
    op.create_index("ix_records_source_time", "records", ["source", "time"])
    op.create_table(
        "offset_changes",
        *common(),
        sa.Column("group", sa.String(255), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("queue_id", sa.Integer(), nullable=False),
        sa.Column("old", sa.BigInteger(), nullable=False),
        sa.Column("new", sa.BigInteger(), nullable=False),
        sa.Column("removed", sa.Boolean(), nullable=False),
        sa.Column("cause", sa.String(100), nullable=True),
        sa.Column("requester", sa.String(255), nullable=True),
        sa.PrimaryKeyConstraint("source", "seq", "n", name="pk_offset_changes"),
    )
    op.create_index(
        "ix_offset_changes_source_group_topic_queue_id_seq",
        "offset_changes",
        ["source", "group", "topic", "queue_id", "seq"],
    )
    op.create_index("ix_offset_changes_source_time", "offset_changes", ["source", "time"])
    op.create_table(
        "queue_appends",
        *common(),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("queue_id", sa.Integer(), nullable=False),
        sa.Column("queue_offset", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("first_physical_offset", sa.BigInteger(), nullable=True),
        sa.Column("producer_group", sa.String(255), nullable=True),
        sa.Column("requester", sa.String(255), nullable=True),
        sa.PrimaryKeyConstraint("source", "seq", "n", name="pk_queue_appends"),
    )
    op.create_index(
        "ix_queue_appends_source_topic_queue_id_seq",
        "queue_appends",
        ["source", "topic", "queue_id", "seq"],
    )


def downgrade() -> None:
    op.drop_table("queue_appends")
    op.drop_table("offset_changes")
    op.drop_table("records")
    op.drop_table("readmodel_checkpoints")
