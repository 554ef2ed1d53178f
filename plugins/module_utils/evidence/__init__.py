"""Evidence helpers: the redactor and record schema helpers (pure)."""
