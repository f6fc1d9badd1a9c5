import sys

from imgalign.cli import console_main

sys.exit(console_main())
