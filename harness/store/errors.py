"""The store's one error type: a one-line message for the user, never a credential."""


class StoreError(RuntimeError):
    """Opening or querying the store failed in a way the user can fix (bad URL, unknown study...)."""
