"""Adapters (file system, metastore, bus, settings) and the pure ACID rules in ``acid``."""

# The folder is the package acidclean.shared (acidclean/shared links here). Imported under its bare name
# (a repository root on sys.path), every module would load twice and `except` clauses and isinstance
# checks would silently miss the other copy's classes.
if __name__ != "acidclean.shared":
    raise ImportError(f"import acidclean.shared, not {__name__}: this folder is part of the acidclean package")
