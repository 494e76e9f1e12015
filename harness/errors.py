"""Errors whose message is written for the user; the CLI turns them into exit codes."""


class LabError(Exception):
    """Something went wrong while running the lab (exit code 1)."""

    exit_code = 1


class BadInput(LabError):
    """The request cannot be carried out as given; nothing was started (exit code 2)."""

    exit_code = 2
