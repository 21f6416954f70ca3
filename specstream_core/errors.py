"""User-facing errors: one clear line, no stack trace, for anything a caller can fix."""


class SpecstreamError(Exception):
    """An error whose message is meant for the user (CLI prints it on one line and exits 2)."""
