"""Operating a worker: logging, health and readiness, the live status page, its HTTP server."""
