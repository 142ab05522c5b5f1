import sys

from llama_ffi.cli import main

sys.exit(main())
