"""The ``easyjob`` command line: :func:`main` takes the arguments and returns the exit code.

Exit codes (also in ``docs/cli.md``):

=====  =====================================================================================
0      success
1      an unexpected error (a bug; its traceback is logged)
2      bad usage or input: an option or ``EASYJOB_*`` variable, a duration, a cron
       expression, a job module, a database URL that cannot be used (ConfigError)
3      the database cannot be used: unreachable, easyjob tables missing or of another schema
       version (DatabaseError), or a database error that outlasted the retries
4      no task of the given name (TaskNotFoundError): ``trigger``, ``pause``, ``resume``,
       ``history --task``; no run of the given id (RunNotFoundError): ``cancel``; no
       calendar of the given name, or not the days given (CalendarNotFoundError):
       ``calendar remove``, ``calendar list NAME``
5      ``trigger`` made the run, but no live node can run the task: it waits PENDING
       until a node whose code declares the task (or allows its function with
       ``@runnable``) starts (a warning on stderr says so)
6      ``schedule add`` or ``schedule set`` refused: no live node can run the function
       (NotRunnableError); nothing was written. ``--force`` writes it anyway
7      ``cancel``: the run had ended already (SUCCESS, FAILED, ...): nothing changed
130    interrupted: Ctrl-C during a command, or a second SIGTERM/SIGINT while a node stops
=====  =====================================================================================

Every option also reads an ``EASYJOB_*`` environment variable, named in ``--help``.
Errors are one line on stderr, ``easyjob: <message>``; output goes to stdout.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from easyjob import logs
from easyjob.cli.options import build_parser
from easyjob.errors import (
    CalendarNotFoundError,
    ConfigError,
    DatabaseError,
    NotRunnableError,
    RunNotFoundError,
    TaskNotFoundError,
)

__all__ = [
    "EXIT_DATABASE",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_RUNNABLE",
    "EXIT_NO_NODE_CAN_RUN",
    "EXIT_NO_TASK",
    "EXIT_OK",
    "EXIT_USAGE",
    "main",
]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_DATABASE, EXIT_NO_TASK = 0, 1, 2, 3, 4
EXIT_NOT_RUNNABLE = 5
EXIT_NO_NODE_CAN_RUN = 6
EXIT_INTERRUPTED = 130

log = logging.getLogger("easyjob.cli")


def _fail(message: object, code: int) -> int:
    sys.stderr.write(f"easyjob: {message}\n")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with *argv* (default ``sys.argv[1:]``); returns the exit code."""
    from easyjob import __version__

    try:
        args = build_parser(__version__).parse_args(argv)
    except ConfigError as err:
        return _fail(err, EXIT_USAGE)
    except SystemExit as exit_:  # argparse has printed the usage error, or the help
        return EXIT_OK if exit_.code in (0, None) else EXIT_USAGE
    logs.setup(args.log_level, args.log_format)
    try:
        return _command(args.command)(args)
    except (TaskNotFoundError, RunNotFoundError, CalendarNotFoundError) as err:
        return _fail(err, EXIT_NO_TASK)
    except NotRunnableError as err:
        return _fail(err, EXIT_NO_NODE_CAN_RUN)
    except ConfigError as err:
        return _fail(err, EXIT_USAGE)
    except DatabaseError as err:
        return _fail(err, EXIT_DATABASE)
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)
    except Exception as err:
        return _unexpected(err)


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """The function of command *name*, its modules imported only now: ``--version`` and
    ``--help`` import neither the store nor SQLAlchemy, and ``trigger``, ``schedule`` and
    ``cancel`` not the other commands' modules (docs/cli.md, "Start-up cost")."""
    from easyjob.cli import control

    if name in control.COMMANDS:
        return control.COMMANDS[name]
    from easyjob.cli.commands import COMMANDS

    return COMMANDS[name]


def _unexpected(err: Exception) -> int:
    from sqlalchemy.exc import DBAPIError

    text = str(err).strip().splitlines()
    first = text[0] if text else type(err).__name__
    if isinstance(err, DBAPIError):  # a database fault that outlasted the retries
        return _fail(f"database error: {first}", EXIT_DATABASE)
    log.error("unexpected error", exc_info=err)
    return _fail(f"unexpected error: {type(err).__name__}: {first}", EXIT_ERROR)
