"""The errors only the streaming layer raises: the sink's commit protocol and the files
it keeps in ``.seglog-sink/``. Each derives from ``seglog.logstore.errors.SeglogError``,
so one ``except SeglogError`` still catches every seglog error; the engine's errors
(and ``DataLossError``, the base of the engine's ``MissingDataError``, which the source
also raises for ``failOnDataLoss``) stay in ``seglog.logstore.errors``.
"""

from __future__ import annotations

from seglog.logstore.errors import SeglogError


class SinkCommitError(SeglogError):
    """The sink cannot publish a batch as staged (a task left no commit message, the topic
    changed under the batch, a staging file is missing); nothing of the batch is visible."""


class LedgerDamagedError(SeglogError, ValueError):
    """A sink ledger file that does not parse into a valid ledger (the message says why)."""


class IntentDamagedError(SeglogError, ValueError):
    """A commit intent file that does not parse into a valid intent (the message says why)."""
