"""What an explanation becomes for people and for CI systems: an HTML report, JUnit XML,
GitHub workflow annotations and step summary. Torch-free: they read traces only."""
