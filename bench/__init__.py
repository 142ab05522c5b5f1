"""llama-ffi's benchmark, against llama.cpp's own tools built from the pinned tree
(``python -m llama_ffi.bench --help``): one table per module of this package."""
