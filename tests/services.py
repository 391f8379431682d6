"""Service fixtures: filled in as the edges arrive."""
