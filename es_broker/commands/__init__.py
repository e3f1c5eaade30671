"""Actions: each turns a request into records, deciding everything once."""
