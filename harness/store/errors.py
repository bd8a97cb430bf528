"""The store's one error type: a one-line message for the user, never a credential."""


from trials.errors import ArchsearchError


class StoreError(ArchsearchError, RuntimeError):
    """Opening or querying the store failed in a way the user can fix (bad URL, unknown study...)."""

    kind = "store"


class StoreDriverError(StoreError):
    """The database failed under a store call (a server gone, a full disk, a corrupt file, a
    constraint): the driver's error wrapped where it happened, in one line without a credential,
    the original kept as ``__cause__`` for the crash log (as Optuna's storage wraps SQLAlchemy's in
    ``StorageInternalError``). Callers catch :class:`StoreError`, never a driver's exception."""
