"""The store's one error type: a one-line message for the user, never a credential."""


from trials.errors import ArchsearchError


class StoreError(ArchsearchError, RuntimeError):
    """Opening or querying the store failed in a way the user can fix (bad URL, unknown study...)."""

    kind = "store"
