"""The vacuum job (PySpark), the ingest writer, the lock-holding reader and the initiator."""
