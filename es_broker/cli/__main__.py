"""`python -m es_broker.cli ...`: the `es-broker` command."""

import sys

from es_broker.cli import main

sys.exit(main())
