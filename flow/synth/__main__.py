import sys

from flow.synth.driver import main

sys.exit(main())
