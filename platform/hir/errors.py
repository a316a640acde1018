"""The user-error types: a mistake the user can fix (a bad setting, an unreadable input, a full disk).

The command line maps every type in :data:`USER_ERRORS` to one line on stderr and exit status 2;
anything else is a bug and keeps its traceback. This module imports nothing of ``hir``.
"""

from __future__ import annotations


class SettingsError(ValueError):
    """A setting has a value the platform cannot use; the message names the variable."""


class SourceError(Exception):
    """Input that cannot be read at all; the message is one line naming the file and the problem."""


class StorageError(OSError):
    """Writing to the data home failed (disk full, read-only, …); earlier outputs are intact."""


USER_ERRORS = (SettingsError, SourceError, StorageError)
