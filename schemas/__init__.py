"""Event models (pydantic) and their published JSON Schemas."""

# The folder is the package acidclean.schemas (acidclean/schemas links here). Imported under its bare name
# (a repository root on sys.path), every module would load twice and `except` clauses and isinstance
# checks would silently miss the other copy's classes.
if __name__ != "acidclean.schemas":
    raise ImportError(f"import acidclean.schemas, not {__name__}: this folder is part of the acidclean package")
