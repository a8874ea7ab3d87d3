"""TLS for the webhook: certificates (certs), hot reload (watch) and the in-cluster bootstrap Job (bootstrap)."""
