"""dcp.Error, the one exception dcp raises for a failed call or bad input
(no grpc here: dcp.SyntheticCorpus and dcp.torch import without it)."""


class Error(RuntimeError):
    """A dcp call failed. ``str(error)`` is the status text
    ("DEADLINE_EXCEEDED: rank 0: no step after 3 arrived within 10s"),
    ``code`` the status code's name (``"DEADLINE_EXCEEDED"``) and
    ``message`` the text after it."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


def invalid(message):
    return Error("INVALID_ARGUMENT", message)
