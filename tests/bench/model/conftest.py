"""The scale model's modules live in bench/model (not a package): put it on the path."""

import os
import sys

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench", "model")
sys.path.insert(0, os.path.abspath(MODEL))
