import sys

from ddp_lib.cli import main

if __name__ == "__main__":
    sys.exit(main())
