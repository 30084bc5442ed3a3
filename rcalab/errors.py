"""Every error rcalab raises on purpose. Each message names the file, row or field at fault."""


class RcalabError(Exception):
    """Base class: the command line turns these into one line on stderr and exit status 1."""


class ScheduleError(RcalabError):
    """A fault schedule (ground-truth file) that cannot be replayed."""


class OutputError(RcalabError):
    """An output location that cannot be written."""


class StoreError(RcalabError):
    """A feature store that cannot be opened or is busy."""


class DumpError(RcalabError):
    """A dump whose layout or format cannot be read."""


class LoadError(RcalabError):
    """One input file that cannot be loaded; the rest of the load goes on."""


class LLMError(RcalabError):
    """The language model cannot be reached, started or understood."""
