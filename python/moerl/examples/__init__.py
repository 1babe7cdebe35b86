"""Small, readable uses of the ``moerl`` package (not part of its API)."""
