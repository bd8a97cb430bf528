"""The store's one error type: a one-line message for the user, never a credential."""

from __future__ import annotations

from trials.errors import ArchsearchError, capped


class StoreError(ArchsearchError, RuntimeError):
    """Opening or querying the store failed in a way the user can fix (bad URL, unknown study...)."""

    kind = "store"


class NoStore(StoreError):
    """There is no store at the URL yet (no SQLite file, or a database without archsearch's tables):
    what a command that would create one checks first, so that a refused command creates nothing."""


class StoreDriverError(StoreError):
    """The database failed under a store call (a server gone, a full disk, a corrupt file, a
    constraint): the driver's error wrapped where it happened, in one line without a credential,
    the original kept as ``__cause__`` for the crash log (as Optuna's storage wraps SQLAlchemy's in
    ``StorageInternalError``). Callers catch :class:`StoreError`, never a driver's exception."""


class LeaseLost(StoreError):
    """This driver no longer holds its study's lease (another driver took the study over, the study
    was judged interrupted, or it was deleted): it must stop writing to the study and end its search
    (:mod:`harness.store.liveness`)."""

    @classmethod
    def deleted(cls, study: str) -> LeaseLost:
        return cls(f"study {study!r} no longer exists in the store (deleted while this search ran)")


class DamagedRow(StoreError):
    """One stored row whose JSON (or number) column does not parse into its record
    (:mod:`harness.store.rows`): that study's or that trial's problem, said in one line naming the
    study, the trial and the column (``study 'x' trial 3: column 'config' is not JSON``), never an
    internal error for the rows beside it. Reads that list trials leave such a trial out and note it
    (``Store.damaged_rows()``); a read of that one row raises this."""

    def __init__(self, study: str, trial: object, column: str, problem: str) -> None:
        self.study, self.trial, self.column, self.problem = study, trial, column, problem
        super().__init__(f"{self.where}: column {column!r} {problem}")

    @property
    def where(self) -> str:
        """``study 'x'`` or ``study 'x' trial 3``: the row, its study's name escaped and capped."""
        study = f"study {capped(self.study)!r}"
        if self.trial is None:
            return study
        trial = self.trial if isinstance(self.trial, int) else repr(capped(self.trial))
        return f"{study} trial {trial}"

    @property
    def key(self) -> tuple[str, str, str]:
        """What identifies the problem: (study, trial, column); a row found twice is noted once."""
        return (self.study, repr(self.trial), self.column)
