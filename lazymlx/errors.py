"""The one exception type the CLI turns into a single line instead of a traceback, and lazymlx's
own warning type, the only warnings the CLI shows (other libraries' stay out of its output)."""


class LazymlxError(Exception):
    """A problem the user can fix; the message names the problem and the fix."""


class LazymlxWarning(UserWarning):
    """Something the user should know that does not stop the work (a slow BLAS, ...)."""
