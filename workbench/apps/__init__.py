"""The command line (``cli``), the demo it runs (``demo``) and the notebook runner (``notebooks``).

The other applications are packages of their own: ``eval``, ``dashboard``, ``regress``, ``integrations``."""
