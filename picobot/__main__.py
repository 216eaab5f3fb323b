import sys

from picobot.cli.main import main

sys.exit(main())
