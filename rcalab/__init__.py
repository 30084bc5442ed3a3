"""rcalab: root-cause analysis of microservice incidents."""

__version__ = "0.1.0"
