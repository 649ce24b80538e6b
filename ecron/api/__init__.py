"""The web side of ecron: REST API, callbacks, health."""
