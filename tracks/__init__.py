"""tracks package (filled by later issues)."""
