"""The main job on the Mininet testbed: the DRL host programs (``hosts``) and the
launcher that runs them on a ``bmv2_topologies.testbed.Testbed`` (``drl``)."""
