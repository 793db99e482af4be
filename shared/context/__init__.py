"""Context budgeting: how big a request is, and how much room it may take."""
