"""smqsup.store."""
