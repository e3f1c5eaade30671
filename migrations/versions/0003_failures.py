"""Quarantine: records the read model could not store, kept with their error and skipped.

Revision ID: 0003_failures
Revises: 0002_audit
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_failures"
down_revision = "0002_audit"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "readmodel_failures",
        sa.Column("source", sa.String(200), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("time", sa.BigInteger(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("version", sa.String(50), nullable=False),
        sa.Column("first_failed_at", sa.BigInteger(), nullable=False),
        sa.Column("last_failed_at", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("source", "seq", name="pk_readmodel_failures"),
    )


def downgrade() -> None:
    op.drop_table("readmodel_failures")
