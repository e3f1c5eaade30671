"""Engines and migrations of the SQL read model.

The default database is SQLite in the broker's data directory; any SQLAlchemy
URL works (PostgreSQL is tested). The schema is owned by the Alembic
migrations in the project's top-level `migrations/` directory: `alembic
upgrade head` from the project root, or `upgrade(engine)` from code (the
follower calls it before it starts).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # SQLAlchemy is imported where an engine is made: `serve` asks default_url only
    from alembic.config import Config
    from sqlalchemy import Engine
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.pool import ConnectionPoolEntry

SQLITE_NAME = "readmodel.sqlite"

# the database drivers SQLAlchemy imports for a URL, and how to have one (the postgres extra
# installs psycopg 3, postgresql+psycopg://)
DRIVER_HINTS = {
    "psycopg": "pip install 'es-broker[postgres]'",
    "psycopg2": "pip install 'es-broker[postgres]' and give a postgresql+psycopg:// URL",
}


def default_url(data_dir: str | Path) -> str:
    return f"sqlite:///{Path(data_dir).resolve() / SQLITE_NAME}"


def open_engine(url: str) -> Engine:
    """An engine for the read model; SQLite gets WAL so readers never block the follower."""
    from sqlalchemy import create_engine, event

    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            # a killed process loses nothing committed with NORMAL in WAL mode; only power loss could
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def shown_url(url: str) -> str:
    """A read model's URL as a message shows it: without its password."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # a URL SQLAlchemy cannot parse is said as given
        return url


def driver_not_installed(url: str, exc: ModuleNotFoundError) -> str:
    """One line: the database driver SQLAlchemy imports for `url` is not installed, and how to
    have it when DRIVER_HINTS knows."""
    hint = DRIVER_HINTS.get(exc.name or "")
    said = f"the database driver of {shown_url(url)} is not installed (no module {exc.name})"
    return f"{said}: {hint}" if hint else said


def engine_error(url: str) -> str | None:
    """Why no engine for `url` can be made here, in one line (its driver not installed, a
    dialect SQLAlchemy does not know); None when one can. It connects to nothing: a database not
    reachable yet is for the follower to wait for."""
    from sqlalchemy.exc import ArgumentError

    try:
        open_engine(url).dispose()  # imports the driver, as the follower's engine does
    except ModuleNotFoundError as exc:
        return driver_not_installed(url, exc)
    except ArgumentError as exc:  # NoSuchModuleError: no dialect or driver of that name
        return f"the read model URL {shown_url(url)}: {exc}"
    return None


def migrations_dir() -> Path:
    """The Alembic script directory: the source tree's `migrations/`, or the installed copy of it."""
    here = Path(__file__).resolve().parents[2] / "migrations"
    if (here / "env.py").is_file():
        return here
    import importlib.util

    spec = importlib.util.find_spec("migrations")
    if spec and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location)
            if (candidate / "env.py").is_file() and "es_broker" in (
                candidate / "env.py"
            ).read_text():
                return candidate
    raise FileNotFoundError("the read model's Alembic migrations (migrations/) were not found")


def alembic_config(url: str | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if url:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database's schema to `revision` (Alembic upgrade, in one transaction)."""
    from alembic import command

    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str) -> None:
    from alembic import command

    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def revisions() -> list[str]:
    """Every revision, oldest first."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return [r.revision for r in reversed(list(script.walk_revisions()))]
