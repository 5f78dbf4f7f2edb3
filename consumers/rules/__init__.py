"""docs/design.md section 7, one module per rule the cleaner enforces, each pure (no I/O, no adapter):

* :mod:`.readiness`: rule 1, nothing is deleted while a reader of the vacuum's snapshot may still read;
* :mod:`.obsolete`: rule 3, only what this vacuum's own commit superseded;
* :mod:`.paths`: rule 4, only direct ACID children of the table's location under the tenant's roots;
* :mod:`.verdicts`: the answers they give (refuse, not yet).

Rules 2 and 6 are the vacuum's (:mod:`acidclean.producers.commit`), rule 5 the message loop's
(:mod:`acidclean.consumers.loop`). ``docs/safety.md`` maps every rule to its code and its tests.
"""
