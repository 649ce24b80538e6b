"""``ecron validate -c DIR``: check a config directory and print every problem at once."""
