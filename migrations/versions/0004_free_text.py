"""Free text: the requester, client and producer-group columns hold any text a record may hold.

Revision ID: 0004_free_text
Revises: 0003_failures
Create Date: 2026-11-23

A record's text may be up to 1 MiB (B-138); these columns come from clients (client ids,
addresses, producer groups given through the API) and were VARCHAR(255), which PostgreSQL
enforces: such a record went to quarantine instead of into the tables.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_free_text"
down_revision = "0003_failures"
branch_labels = None
depends_on = None

COLUMNS = {
    "offset_changes": ("requester",),
    "queue_appends": ("producer_group", "requester"),
    "resets": ("requester",),
    "topic_changes": ("requester",),
    "group_changes": ("requester",),
    "deliveries": ("client",),
    "offset_queries": ("requester",),
    "corrections": ("requester",),
    "send_backs": ("requester",),
    "dead_letters": ("requester",),
}


def _retype(new: sa.types.TypeEngine, old: sa.types.TypeEngine) -> None:
    for table, columns in COLUMNS.items():
        with op.batch_alter_table(table) as batch:  # SQLite rebuilds the table, others ALTER it
            for column in columns:
                batch.alter_column(column, type_=new, existing_type=old, existing_nullable=True)


def upgrade() -> None:
    _retype(sa.Text(), sa.String(255))


def downgrade() -> None:
    _retype(sa.String(255), sa.Text())
