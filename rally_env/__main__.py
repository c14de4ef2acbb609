import sys

from rally_env.cli import main

sys.exit(main())
