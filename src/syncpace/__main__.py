import sys

from syncpace.cli.main import main

sys.exit(main())
