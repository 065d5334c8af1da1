"""Runs the Python module's tests; exits 77 (CTest: skipped) where numpy or pytest is missing."""

import sys

try:
    import numpy  # noqa: F401
    import pytest
except ImportError as e:
    print(f"Python tests skipped: {e} (install python3-numpy and python3-pytest)")
    sys.exit(77)

sys.exit(pytest.main(["-p", "no:cacheprovider", *sys.argv[1:]]))
