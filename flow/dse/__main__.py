import sys

from flow.dse.cli import main

sys.exit(main())
