"""Subcommands of the ``olaf`` CLI, discovered by ``olaf.cli``."""
