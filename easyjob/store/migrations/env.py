"""Alembic's environment for easyjob's migrations, run by :mod:`easyjob.store.migrations`
(never by the ``alembic`` command: there is no ``alembic.ini``).

Online, the caller hands over its connection (``config.attributes["connection"]``), already
inside the transaction and the schema lock that it commits and releases. Offline
(``easyjob sql --upgrade-from N``), the SQL is written for ``config.attributes["dialect"]``.
"""

from __future__ import annotations

from alembic import context

from easyjob.store.migrations.steps import VERSION_TABLE

config = context.config
if context.is_offline_mode():
    context.configure(
        dialect_name=config.attributes["dialect"],
        literal_binds=True,
        version_table=VERSION_TABLE,
        output_buffer=config.output_buffer,
    )
else:
    context.configure(connection=config.attributes["connection"], version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
