"""Alembic environment of the es_broker SQL read model.

The URL comes from, in order: a connection handed in by es-broker itself
(`es_broker.readmodel.db.upgrade`), `-x url=...`, $ES_BROKER_READMODEL_URL,
then `sqlalchemy.url` in alembic.ini.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, pool

from es_broker.readmodel.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return (
        context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get("ES_BROKER_READMODEL_URL")
        or config.get_main_option("sqlalchemy.url")
    )


def run_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
