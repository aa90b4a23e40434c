"""Problem descriptions, one module per primitive."""
