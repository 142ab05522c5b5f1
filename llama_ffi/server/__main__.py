"""``python -m llama_ffi.server ...``: the same as ``llama-ffi serve ...``."""

import sys

from llama_ffi.cli import main

sys.exit(main(["serve", *sys.argv[1:]]))
