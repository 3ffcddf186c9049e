"""smqsup.cli.main."""
