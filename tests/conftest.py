import os
import sys

# Make `tests/helpers` importable as plain modules.
sys.path.insert(0, os.path.dirname(__file__))
