"""functional."""
