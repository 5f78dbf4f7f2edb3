"""The initiator: requests vacuums when Hive's compactor thresholds are crossed (issue 13)."""
