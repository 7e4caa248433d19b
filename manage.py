#!/usr/bin/env python
"""Django's command-line utility for Headroom."""
import os
import sys


def database_problem(error: Exception) -> str | None:
    """One line saying what is wrong with the database, or None when `error` is something else.

    A database that is down or has no tables fails every command at its first query, 29 frames deep;
    anything else (a deadlock, a bad query) is a bug or a race and keeps its traceback."""
    from django.db import OperationalError, connection

    cause = error.__cause__
    if getattr(cause, "sqlstate", None) == "42P01" or "no such table" in str(error):  # PostgreSQL, SQLite
        return (f"the database has no tables: run `make migrate` (or `manage.py migrate` with this DATABASE_URL) "
                f"first ({str(error).splitlines()[0]})")
    if not isinstance(error, OperationalError):
        return None
    try:  # a second connection tells a database that is down from an error inside a working one
        connection.close()
        connection.ensure_connection()
    except OperationalError as probe:
        where = connection.settings_dict
        target = f"{where.get('HOST') or 'localhost'}:{where.get('PORT') or 'default port'}/{where.get('NAME')}"
        return f"cannot reach the database {target} (check DATABASE_URL): {str(probe).splitlines()[0]}"
    return None


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line
    from django.db import OperationalError, ProgrammingError

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as error:  # a setting's own message names it: no traceback around it
        sys.stderr.write(f"error: {error}\n")
        sys.exit(1)
    except (OperationalError, ProgrammingError) as error:
        problem = database_problem(error)
        if problem is None:
            raise
        sys.stderr.write(f"error: {problem}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
