"""smqsup.worker."""
