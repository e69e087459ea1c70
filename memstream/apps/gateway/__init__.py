"""The stateless query gateway: HTTP in front of the turns topic, the stores and memory.updates."""
