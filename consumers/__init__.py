"""The cleaner consumer group (readyToClean, delay handling, delete, report) and the audit reader."""
