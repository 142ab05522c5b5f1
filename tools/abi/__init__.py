"""ABI tools: ``snapshot`` (compiler-measured layouts of a tree), ``diff`` (classified changes
between two snapshots or trees), ``bump`` (the llama.cpp update workflow)."""
