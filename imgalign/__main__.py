import sys

from imgalign.cli import main

sys.exit(main())
