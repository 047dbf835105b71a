"""The benchmark harnesses of scripts/ (their own logic, on tiny inputs)."""
