"""The vacuum job (PySpark), the ingest writer, the lock-holding reader and the initiator."""

# The folder is the package acidclean.producers (acidclean/producers links here). Imported under its bare name
# (a repository root on sys.path), every module would load twice and `except` clauses and isinstance
# checks would silently miss the other copy's classes.
if __name__ != "acidclean.producers":
    raise ImportError(f"import acidclean.producers, not {__name__}: this folder is part of the acidclean package")
