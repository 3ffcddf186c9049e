"""smqsup.config.model."""
