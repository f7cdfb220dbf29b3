"""The one exception type the CLI turns into a single line instead of a traceback."""


class LazymlxError(Exception):
    """A problem the user can fix; the message names the problem and the fix."""
