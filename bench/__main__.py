import sys

from llama_ffi.bench.cli import main

sys.exit(main())
