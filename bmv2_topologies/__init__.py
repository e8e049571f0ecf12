"""Mininet topologies (p4lang/tutorials topology.json format) and the testbed that runs the
OLAF job on them with the software switch or bmv2; see README.md and ``olaf testbed``."""
