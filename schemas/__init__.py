"""Event models (pydantic) and their published JSON Schemas."""
