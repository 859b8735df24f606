import os
import sys

# Shared IR examples live beside the tests.
sys.path.insert(0, os.path.dirname(__file__))
os.chdir(os.path.join(os.path.dirname(__file__), "..", ".."))
