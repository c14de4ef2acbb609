"""agents package (filled by later issues)."""
