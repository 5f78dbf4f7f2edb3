"""The generated pages of the documentation site (``python -m acidclean.docsgen``; ``make docs`` runs it).

Each page is made from the code it documents, so it cannot drift: the command line's reference from
the click commands, the settings' from the settings model, the error list from every message the code
can print. ``tests/unit/test_docs.py`` fails when a committed page differs from what this makes.
"""
