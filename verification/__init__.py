"""Z3 model of an OLAF deployment and the ``verify-aom`` command (see README.md here).

A library package: it uses ``worker_transport`` (wire format, send policy) and
``dataplane`` (the reference OlafQueue, for replaying counterexamples), never ``olaf``.
"""
