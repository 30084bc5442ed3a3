"""Every error rcalab raises on purpose. Each message names the file, row or field at fault."""


class RcalabError(Exception):
    """Base class: the command line turns these into one line on stderr and exit status 1."""


class ScheduleError(RcalabError):
    """A fault schedule (ground-truth file) that cannot be replayed."""


class OutputError(RcalabError):
    """An output location that cannot be written."""
