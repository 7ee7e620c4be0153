"""``python -m workbench ...`` runs the ``workbench`` command."""

import sys

from workbench.apps.cli import main

if __name__ == "__main__":
    sys.exit(main())
