"""Scripts that start the local stack, and production manifests."""

# The folder is the package acidclean.deploy (acidclean/deploy links here). Imported under its bare name
# (a repository root on sys.path), every module would load twice and `except` clauses and isinstance
# checks would silently miss the other copy's classes.
if __name__ != "acidclean.deploy":
    raise ImportError(f"import acidclean.deploy, not {__name__}: this folder is part of the acidclean package")
