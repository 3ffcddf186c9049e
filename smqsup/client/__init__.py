"""smqsup.client."""
