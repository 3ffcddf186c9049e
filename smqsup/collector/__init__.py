"""smqsup.collector."""
