"""The cleaner consumer group (readyToClean, delay handling, delete, report) and the audit reader."""

# The folder is the package acidclean.consumers (acidclean/consumers links here). Imported under its bare name
# (a repository root on sys.path), every module would load twice and `except` clauses and isinstance
# checks would silently miss the other copy's classes.
if __name__ != "acidclean.consumers":
    raise ImportError(f"import acidclean.consumers, not {__name__}: this folder is part of the acidclean package")
