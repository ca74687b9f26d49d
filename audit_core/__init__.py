"""The auditing library: methods, targets, the audit, its store and its reports."""

#: the tool version written into every report (bump on release)
__version__ = "0.1.0"
