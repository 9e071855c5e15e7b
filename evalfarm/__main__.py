import sys

from evalfarm.cli import main

sys.exit(main())
