"""Apps: the processes and commands (gateway, cli, demo, eval, replay, sample...)."""
