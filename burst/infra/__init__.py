"""Infrastructure: the Terraform driver, provisioning with failover, teardown, leak scan, reaper.

``terraform`` (the driver; ``tfbin`` its embedded binary) runs in a run's ``workspace``
(with ``runrecord`` beside its state, ``statelock`` for a killed apply's lock); ``provision``
fails over through the plan's candidates; ``teardown`` destroys and proves nothing is left,
after ``ckptsync`` confirmed the final checkpoint; ``leakscan`` and ``cloudscan`` find what a
run left by its tags, ``reaper`` destroys expired runs (``procs``: what still drives them);
``remote_errors`` makes one line of a failed remote call.
"""
