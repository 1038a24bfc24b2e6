"""`UserError`: a mistake in what the user gave us (a file, a field, a recipe key, an option), not a bug.

Every stage raises a subclass of it for bad input, and the `stepcritic` command turns any of them into one line
`stepcritic <command>: error: ...` and exit code 2; anything else is a bug and keeps its traceback. Stdlib only:
every stage imports it, the command-line entry point first.
"""


class UserError(Exception):
    """Bad input, reported as one line naming the record/field/key; exit code 2 at the command line."""
