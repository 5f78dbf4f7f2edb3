"""Scripts that start the local stack, and production manifests."""
