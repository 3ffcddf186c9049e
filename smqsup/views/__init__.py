"""smqsup.views."""
