"""rally_env package (filled by later issues)."""
