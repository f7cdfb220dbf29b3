"""The `lazymlx` command line (installed as `lazymlx.cli`): thin commands over the Python API."""
