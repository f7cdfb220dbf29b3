"""The one exception type the CLI turns into a single line instead of a traceback, and lazymlx's
own warning type, the only warnings the CLI shows (other libraries' stay out of its output)."""


class LazymlxError(Exception):
    """A problem the user can fix; the message names the problem and the fix."""


class LazymlxWarning(UserWarning):
    """Something the user should know that does not stop the work (a slow BLAS, ...)."""


class RankError(LazymlxError):
    """A failure of one rank of a distributed run alone (a file missing on its machine, its
    connection gone): each rank prints its own, while an error every rank meets alike (a bad
    argument) is printed once, by rank 0 (lazymlx/parallel/distributed.py)."""
