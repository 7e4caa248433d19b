"""Loaded by pytest before Django is set up: test-only defaults for the environment."""
import os

os.environ.setdefault("SECRET_KEY", "test-only-secret-key")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/headroom")
