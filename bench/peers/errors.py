"""How a peer run fails: raised by the drivers (``river_peer``) and reported by the harness."""


class PeerError(RuntimeError):
    """A peer run failed or timed out; the message carries the tail of its output."""


class PeerUnavailable(PeerError):
    """A peer cannot be installed or built on this machine; the message says why."""
