"""Alembic migrations of es-broker's SQL read model (installed with the package, see pyproject)."""
