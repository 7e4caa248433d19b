"""The Kubernetes API emulator: an object store, an HTTP API server and a controller wired to the fleet."""
