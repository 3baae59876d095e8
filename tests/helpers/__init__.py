"""Shared test helpers: crash and power-loss simulation, and byte-level access to store files."""
