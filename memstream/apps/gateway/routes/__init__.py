"""The gateway's routes, one router per concern (its OpenAPI tag): ingest, recall, tools, memories,
users, ops. Each takes what it needs through the dependencies of ``memstream.apps.gateway.deps``."""
