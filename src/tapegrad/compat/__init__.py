"""Compatibility aliases for code written against other libraries' names."""
