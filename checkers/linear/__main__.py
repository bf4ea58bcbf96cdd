import sys

from checkers.linear.cli import main

sys.exit(main())
