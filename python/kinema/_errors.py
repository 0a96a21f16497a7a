"""kinema's exceptions. The native module raises them with the Rust error's text."""


class KinemaError(RuntimeError):
    """An error from kinema (its message is the Rust error's text, unchanged)."""


class InvalidArgumentError(KinemaError, ValueError):
    """A bad argument: an option out of range, a wrong shape or dtype. Also a ValueError."""


class Cancelled(KinemaError):
    """The progress callback asked to stop (returned False); nothing was produced."""
