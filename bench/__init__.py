"""llama-ffi's benchmark, against llama.cpp's own tools built from the pinned tree
(``python -m bench --help``): one table per module of this package."""
