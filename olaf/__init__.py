"""OLAF."""
