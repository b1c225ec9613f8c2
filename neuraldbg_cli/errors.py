"""The one exception family the CLI turns into a one-line message and exit code 2."""


class InputError(Exception):
    """Bad usage or bad input: printed as one line, exit status 2, script not started."""

    exit_code = 2
