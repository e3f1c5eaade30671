"""The audit of access: loads of the broker's ACL rules and summaries of refused requests (B-190..B-194).

Revision ID: 0006_acl_audit
Revises: 0005_queue_locks
Create Date: 2026-12-20

`acl_changes`: one row per account per `acl_loaded` record (one row with a null access_key for a
load without accounts). `access_denials`: one row per (who, host, code) of an `access_denied`
summary. Texts a client or a file supplies (access keys, requesters, address patterns, hosts,
file paths) are Text, as 0004_free_text made the others, and are not indexed (a PostgreSQL index
entry is bounded; the tables are read by source and time).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_acl_audit"
down_revision = "0005_queue_locks"
branch_labels = None
depends_on = None


def _common() -> list[sa.Column]:
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
        "acl_changes",
        *_common(),
        sa.Column("listener", sa.String(50), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("cause", sa.String(100), nullable=False),
        sa.Column("requester", sa.Text(), nullable=True),
        sa.Column("files", sa.Text(), nullable=False),
        sa.Column("data_version_timestamp", sa.BigInteger(), nullable=True),
        sa.Column("data_version_counter", sa.BigInteger(), nullable=True),
        sa.Column("global_white", sa.Text(), nullable=False),
        sa.Column("accounts", sa.Integer(), nullable=False),
        sa.Column("access_key", sa.Text(), nullable=True),
        sa.Column("secret_fp", sa.String(64), nullable=True),
        sa.Column("salt_id", sa.String(64), nullable=True),
        sa.Column("admin", sa.Boolean(), nullable=True),
        sa.Column("white_remote_address", sa.Text(), nullable=True),
        sa.Column("default_topic_perm", sa.String(20), nullable=True),
        sa.Column("default_group_perm", sa.String(20), nullable=True),
        sa.Column("topic_perms", sa.Text(), nullable=True),
        sa.Column("group_perms", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("source", "seq", "n", name="pk_acl_changes"),
    )
    op.create_index("ix_acl_changes_source_time", "acl_changes", ["source", "time"])
    op.create_table(
        "access_denials",
        *_common(),
        sa.Column("listener", sa.String(50), nullable=False),
        sa.Column("window_from", sa.BigInteger(), nullable=False),
        sa.Column("window_to", sa.BigInteger(), nullable=False),
        sa.Column("interval_s", sa.BigInteger(), nullable=False),
        sa.Column("acl_version", sa.BigInteger(), nullable=False),
        sa.Column("who", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("code", sa.Integer(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("source", "seq", "n", name="pk_access_denials"),
    )
    op.create_index("ix_access_denials_source_window_to", "access_denials", ["source", "window_to"])


def downgrade() -> None:
    op.drop_table("access_denials")
    op.drop_table("acl_changes")
